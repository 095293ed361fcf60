# frozen_string_literal: true

require "tmpdir"
require_relative "../support/discourse_stand_ins"

# What the admin dashboard and `rake discourse_ai_stream:check` say, from
# one place (DiscourseAiStream::Discourse::Health): why the gem is not in
# use, and the streams of the last 24 hours that lost or refused something.
# Each message is shown verbatim on docs/troubleshooting.md.
RSpec.describe DiscourseAiStream::Discourse::Health, gc_stress: false do
  include_context "with the Discourse stand-ins"

  root = File.expand_path("../..", __dir__)

  let(:troubleshooting) { File.read(File.join(root, "docs/troubleshooting.md")) }
  let(:gem) { "discourse_ai_stream #{DiscourseAiStream::VERSION} is installed but" }
  let(:chat) { DiscourseAiStream::Discourse::STOCK_PROCESSOR }
  let(:responses) { DiscourseAiStream::Discourse::STOCK_RESPONSES_PROCESSOR }

  def sse(*chunks) = chunks.map { |chunk| "data: #{JSON.generate(chunk)}\n\n" }

  def mistral = DiscourseAi::Completions::Endpoints::Mistral.new(llm_model("mistral"))

  # A fragment at an index no call was announced at.
  def orphan = { choices: [{ delta: { tool_calls: [{ index: 3, function: { arguments: "x" } }] } }] }

  def done = { choices: [{ delta: {}, finish_reason: "tool_calls" }] }

  # `problem`, whose text docs/troubleshooting.md shows verbatim, and whose
  # link goes to a section of it.
  def documented(problem)
    expect(troubleshooting).to include(problem.text)
    anchor = problem.url.delete_prefix("#{DiscourseAiStream::DOCS}/troubleshooting.md#")
    headings = troubleshooting.scan(/^#+ (.+)$/).map { |(h)| h.downcase.gsub(/[^a-z0-9 _-]/, "").tr(" ", "-") }
    expect(headings).to include(anchor)
    problem
  end

  describe ".not_in_use" do
    it "finds nothing while install! replaced every stock processor" do
      install_into(:legacy)
      expect(described_class.not_in_use).to be_nil
    end

    it "says when install! has not run, and when Discourse AI's endpoints were missing" do
      load_discourse_stand_ins
      expect(documented(described_class.not_in_use).text)
        .to eq("#{gem} not in use: install! has not run in this process.")

      hide_const("DiscourseAi")
      expect(documented(described_class.not_in_use).text).to eq(
        "#{gem} not in use: install! has not run in this process. Discourse AI's endpoints " \
        "(DiscourseAi::Completions::Endpoints) were not loaded when it started."
      )
    end

    # A Discourse AI whose endpoints build their processor in a method of
    # another name: the stock classes are as the gem knows them, and every
    # stream still goes to them.
    # Anthropic's endpoint keeps its processor method (and its patch, which
    # passes its processor through): that is no use of the gem.
    it "says when the OpenAI endpoints have no processor method, whatever other endpoints have" do
      [%w[OpenAi OpenAiResponses], nil].each do |names|
        load_discourse_stand_ins(generation: :newest)
        endpoints = DiscourseAi::Completions::Endpoints
        (names || endpoints.constants).map { |name| endpoints.const_get(name) }.grep(Class).each do |klass|
          klass.send(:remove_method, :processor) if klass.instance_method(:processor).owner == klass
        rescue NameError
          nil
        end
        integration.install!
        expect(integration.patched_classes).to(names ? include(endpoints::Anthropic) : eq([]))
        expect(documented(described_class.not_in_use)).to have_attributes(
          text: "#{gem} not in use: the OpenAI endpoints of DiscourseAi::Completions::Endpoints have no processor " \
                "method, where the gem hands out its processors, so Discourse's own processors decode their streams.",
          url: "#{DiscourseAiStream::DOCS}/troubleshooting.md#no-endpoint-class-was-patched"
        )
        expect(logger.warnings).to include("discourse_ai_stream: the OpenAI endpoints of DiscourseAi::Completions::" \
                                           "Endpoints have no processor method; their processors were not replaced")
      end
    end

    # An endpoint constant whose file raises as it loads is skipped; what
    # else install! meets that it does not expect leaves stock in place.
    it "says when install! raised, which leaves every stock processor in place instead of stopping the boot" do
      install_into(:newest)
      endpoints = DiscourseAi::Completions::Endpoints
      broken = File.join(Dir.mktmpdir, "broken.rb")
      File.write(broken, "raise ArgumentError, 'x'")
      endpoints.autoload(:Broken, broken)
      expect(integration.install!).to be_an(Array)
      expect(logger.warnings).to include(a_string_starting_with("discourse_ai_stream: skipped #{endpoints}::Broken: " \
                                                                "ArgumentError: x"))
      expect(described_class.not_in_use).to be_nil

      allow(integration).to receive(:endpoint_classes).and_raise(TypeError, "no implicit conversion")
      expect(integration.install!).to eq([])
      expect(integration).not_to be_installed
      expect(documented(described_class.not_in_use)).to have_attributes(
        text: "#{gem} not in use: install! raised, so Discourse's own processors decode every stream. The cause:",
        cause: "TypeError: no implicit conversion"
      )
      expect(integration.status.values_at(chat, responses)).to all(include(replaced: false))
      expect(DiscourseAi::Completions::Endpoints::Mistral.new(llm_model("mistral")).send(:processor))
        .to be_a(DiscourseAi::Completions::OpenAiMessageProcessor)
      errors = logger.lines.select { |level, _| level == :error }.map(&:last)
      expect(errors).to include(a_string_including("install! left Discourse's own processors in place: " \
                                                   "install! raised TypeError: no implicit conversion"))
      integration.uninstall!
      expect(described_class.not_in_use.text).to eq("#{gem} not in use: install! has not run in this process.")
    end

    it "says when install!'s enabled: (the site setting) switched it off" do
      install_into(:current, enabled: -> { false })
      expect(documented(described_class.not_in_use)).to have_attributes(
        text: "#{gem} switched off (install!'s enabled:, the discourse_ai_stream_enabled site setting), so " \
              "Discourse's own processors decode every stream.",
        url: "#{DiscourseAiStream::DOCS}/troubleshooting.md#switched-off", cause: nil
      )
    end

    it "names each stock processor left in place for what the gem lacks, and no dialect the replay stands aside for" do
      load_discourse_stand_ins(generation: :newest)
      DiscourseAi::Completions::OpenAiResponsesMessageProcessor.class_eval { def cited_sources = [] }
      integration.install!
      expect(documented(described_class.not_in_use).text).to eq(
        "#{gem} not in use for #{responses} (the gem's DiscourseAiStream::OpenAiResponsesMessageProcessor lacks " \
        "#cited_sources): Discourse's own class stays in place there."
      )

      grown = { replaced: false, reason: "the gem lacks #cited_sources", missing: ["#cited_sources"] }
      aside = { replaced: false, reason: "replays reasoning itself (its own tool_call_msg)", missing: [] }
      allow(integration).to(receive(:status).and_wrap_original do |original|
        original.call.merge(DiscourseAiStream::Discourse::STOCK_PROCESSOR => grown, "Dialects::Vllm" => aside)
      end)
      expect(described_class.not_in_use.text).to end_with(
        "lacks #cited_sources) and #{responses} (the gem's DiscourseAiStream::OpenAiResponsesMessageProcessor " \
        "lacks #cited_sources): Discourse's own classes stay in place there."
      ).and include("not in use for DiscourseAi::Completions::OpenAiMessageProcessor (the gem lacks #cited_sources)")
      # Only the replay standing aside: nothing to report.
      in_use = { replaced: true, missing: [] }
      allow(integration).to receive(:status)
        .and_return(DiscourseAiStream::Discourse::STOCK_PROCESSORS.to_h { |name| [name, in_use] }
                      .merge("Dialects::Vllm" => aside))
      expect(described_class.not_in_use).to be_nil
    end

    it "says nothing of a stock class the site does not have, unless it has none" do
      load_discourse_stand_ins(generation: :legacy)
      DiscourseAi::Completions.send(:remove_const, :OpenAiResponsesMessageProcessor)
      integration.install!
      expect(described_class.not_in_use).to be_nil

      DiscourseAi::Completions.send(:remove_const, :OpenAiMessageProcessor)
      integration.install!
      expect(documented(described_class.not_in_use).text).to eq(
        "#{gem} not in use for #{chat} (not loaded) and #{responses} (not loaded): Discourse's own classes stay in " \
        "place there."
      )
    end

    it "says first that the native extension did not load, with its cause; install! then leaves stock in place" do
      error = LoadError.new("discourse_ai_stream has no native extension that loads\nTried: <a build>")
      allow(DiscourseAiStream).to receive(:load_error).and_return(error)
      load_discourse_stand_ins(generation: :legacy)
      expect(integration.install!).to eq([])
      expect(integration.status.keys).to eq([chat, responses])
      expect(integration.status.values.map { _1[:reason] }.uniq)
        .to eq(["the gem's native extension did not load (DiscourseAiStream.load_error says why)"])
      expect(integration.patched_classes).to eq([])
      expect(logger.lines).to eq([[:error, "discourse_ai_stream #{DiscourseAiStream::VERSION}: install! left " \
                                           "Discourse's own processors in place: #{error.message}"]])

      problem = documented(described_class.not_in_use)
      expect(problem.text).to eq("#{gem} not in use: its native extension did not load, so Discourse's own " \
                                 "processors decode every stream. The cause:")
      expect(problem.cause).to eq(error.message)
      expect(problem.html).to start_with("#{gem} not in use: its native extension did not load, so Discourse&#39;s " \
                                         "own processors decode every stream. The cause:<pre>discourse_ai_stream " \
                                         "has no native extension that loads\nTried: &lt;a build&gt;</pre> <a href=")
    end
  end

  describe ".lost_or_refused" do
    before { install_into(:legacy) }

    it "finds nothing while no stream lost or refused anything: a generated id, a skipped payload" do
      no_id = { index: 0, function: { name: "f", arguments: "{}" } }
      mistral.perform_stream(sse({ choices: [{ delta: { tool_calls: [no_id] } }] }, done) << "data: not json\n\n")
      expect(logger.warnings).to include(a_string_including("generated_id"), a_string_including("non_json_data"))
      expect(described_class.lost_or_refused).to be_nil
    end

    it "counts each stream once, and once under each kind it had, by endpoint" do
      2.times { mistral.perform_stream(sse(orphan, orphan) << "data: {\"choices\":\n\n") }
      vllm = DiscourseAi::Completions::Endpoints::Vllm.new(llm_model("vllm"))
      expect { vllm.perform_stream(sse({ error: { message: "overloaded" } })) }
        .to raise_error(DiscourseAiStream::ProviderError)

      problem = documented(described_class.lost_or_refused)
      expect(problem.text).to eq(
        "In the last 24 hours, 3 streams decoded by discourse_ai_stream lost or refused something. " \
        "orphan_fragment, an arguments fragment matched no tool call: 2 on mistral " \
        "(DiscourseAi::Completions::Endpoints::Mistral); unreadable_event, an event that could not be read was " \
        "skipped: 2 on mistral (DiscourseAi::Completions::Endpoints::Mistral); provider_error, the provider sent " \
        "an error inside the stream, and the request failed: 1 on vllm (DiscourseAi::Completions::Endpoints::Vllm). " \
        "The Rails log has a warn line for each, with the provider."
      )
    end

    # Errors of the gem's own that fail the request, besides the provider's:
    # a stream it cannot read, and a bug it caught.
    it "counts a request the gem itself failed, with a warn line naming the error" do
      deep = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"x\":#{"[" * 200}#{"]" * 200}}]}\n\n"
      expect { mistral.perform_stream([deep]) }.to raise_error(DiscourseAiStream::StreamError)
      bug = DiscourseAiStream::InternalError.new("a bug")
      allow(DiscourseAiStream::OpenAiMessageProcessor).to receive(:new).and_wrap_original do |new, **options|
        new.call(**options).tap { |processor| allow(processor).to receive(:decode_chunk).and_raise(bug) }
      end
      expect { mistral.perform_stream(sse(orphan)) }.to raise_error(bug)
      RSpec::Mocks.space.proxy_for(DiscourseAiStream::OpenAiMessageProcessor).reset
      # The site's ToolCall class refuses the call (a keyword it needs).
      allow(DiscourseAi::Completions::ToolCall).to receive(:new).and_raise(ArgumentError, "missing keyword: :index")
      call = { index: 0, id: "c1", function: { name: "f", arguments: "{}" } }
      expect { mistral.perform_stream(sse({ choices: [{ delta: { tool_calls: [call] } }] }, done)) }
        .to raise_error(DiscourseAiStream::ToolCallError)

      label = "mistral (DiscourseAi::Completions::Endpoints::Mistral)"
      expect(tally.counts).to eq([3, { [:stream_error, label] => 1, [:internal_error, label] => 1,
                                       [:tool_call_failed, label] => 1 }])
      expect(logger.warnings).to include(
        a_string_starting_with("discourse_ai_stream: #{label}: the request failed: DiscourseAiStream::StreamError " \
                               "(too_deep): "),
        "discourse_ai_stream: #{label}: the request failed: DiscourseAiStream::InternalError: a bug",
        a_string_starting_with("discourse_ai_stream: #{label}: the request failed: DiscourseAiStream::ToolCallError: ")
      )
      expect(described_class.lost_or_refused.text).to include(
        "stream_error, #{described_class::ERRORS[:stream_error]}: 1 on #{label}",
        "internal_error, #{described_class::ERRORS[:internal_error]}: 1 on #{label}",
        "tool_call_failed, #{described_class::KINDS[:tool_call_failed]}: 1 on #{label}"
      )
    end

    # The hook (here DiscourseAiStream.on_anomaly, which the Reporter calls)
    # raises what is not its to handle: the read's items are held for a
    # read that does not come, as when a timeout ends the request.
    it "counts a read interrupted by an exception that leaves the endpoint, its items held" do
      stop = Class.new(Exception) # rubocop:disable Lint/InheritException
      DiscourseAiStream.on_anomaly = ->(_) { raise stop }
      call = { index: 0, id: "c1", function: { name: "f", arguments: "{}" } }
      read = sse({ choices: [{ delta: { tool_calls: [call] } }] }, done).join << "data: {\"choices\":\n\n"
      expect { mistral.perform_stream([read]) }.to raise_error(stop)
      label = "mistral (DiscourseAi::Completions::Endpoints::Mistral)"
      expect(tally.counts).to eq([1, { [:unreadable_event, label] => 1, [:interrupted, label] => 1 }])
    ensure
      DiscourseAiStream.on_anomaly = nil
    end
  end

  it "counts kinds the core has, and docs/errors-and-anomalies.md lists them, in its words" do
    core = File.read(File.join(root, "ext/openai_stream/src/anomaly.rs")).scan(/= "([a-z_]+)",/).flatten
    expect(described_class::KINDS.keys.map(&:to_s) - core).to eq([])
    page = File.read(File.join(root, "docs/errors-and-anomalies.md"))
    listed = page[/^## What the admin dashboard counts\n(.*?)(?=^## |\z)/m, 1].to_s
    counted = described_class::COUNTED
    expect(counted).to eq(described_class::KINDS.merge(described_class::ERRORS))
    expect(listed.scan(/^- `([a-z_]+)`/).flatten).to eq(counted.keys.map(&:to_s))
    counted.each_value { |words| expect(listed).to include(words) }
    expect(core.reject { |kind| listed.include?("`#{kind}`") }).to eq([]), "each kind, counted or not, says why"
  end

  it "registers its checks only where Discourse has problem checks" do
    plugin = Object.new
    def plugin.register_problem_check(_) = raise("not expected")
    expect(described_class.register_problem_checks(plugin)).to eq([]), "no ProblemCheck loaded"
    expect(described_class.register_problem_checks(Object.new)).to eq([])
  end

  it "answers each topic by name, and no other" do
    install_into(:legacy)
    expect(described_class::TOPICS.map { |topic| described_class.problem(topic) }).to eq([nil, nil])
    expect { described_class.problem(:other) }.to raise_error(ArgumentError)
  end
end
