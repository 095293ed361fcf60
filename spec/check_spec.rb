# frozen_string_literal: true

require_relative "spec_helper"
require "open3"
require "rake"
require_relative "support/discourse_stand_ins"

# `rake discourse_ai_stream:check` on a site of each Discourse generation
# (the stand-ins): the generation in words, the bug report's streams through
# the stock processors beside the gem's, install!'s decisions, and an exit
# status that says whether the gem is in use and returned every call.
RSpec.describe DiscourseAiStream::Check, gc_stress: false do
  include_context "with the Discourse stand-ins"

  let(:root) { File.expand_path("..", __dir__) }

  def check
    io = StringIO.new
    [described_class.run(io), io.string]
  end

  # [count, stock returned, gem returned] of each case of `api`.
  def tallies(out, api)
    out.scan(/^  #{api}, (\d) calls, partial_tool_calls: \w+: +stock (\d) of \1.*, gem (\d) of \1$/)
       .map { |row| row.map(&:to_i) }
  end

  def all_of(counts = [2, 2, 3, 3]) = counts.map { |count| [count, count, count] }

  {
    legacy: ["legacy, the one-call processor: drops every call of a chunk after the first",
             [[2, 1, 2], [2, 1, 2], [3, 1, 3], [3, 1, 3]], "chat, Responses"],
    current: ["current, the per-call processor: keeps every call of a chunk", :all, "Responses"],
    newest: ["newest, the per-call processor with stop_reason", :all, "Responses"]
  }.each do |generation, (words, chat, losing)|
    it "on the #{generation} generation, says so, sets stock beside the gem, and exits 0 with the gem in use" do
      install_into(generation)
      status, out = check
      expect(status).to eq(0), out
      expect(out).to include("Discourse AI generation: #{words}")
      expect(tallies(out, "chat")).to eq(chat == :all ? all_of : chat)
      # The stock Responses processor keeps one open call: interleaved calls raise.
      expect(tallies(out, "Responses")).to eq(all_of.map { |count, _, ours| [count, 0, ours] })
      expect(out).to include("stock 0 of 3 raised NoMethodError, gem 3 of 3", "Stock loses calls here (#{losing}).")
      expect(out).to include("  #{DiscourseAiStream::Discourse::STOCK_PROCESSOR}: replaced by the gem's",
                             "  #{DiscourseAiStream::Discourse::STOCK_RESPONSES_PROCESSOR}: replaced by the gem's")
      expect(out).to end_with("The gem is in use and returned every call.\n")
    end
  end

  it "prints the lines docs/discourse.md shows for a legacy site" do
    install_into(:legacy)
    shown = File.read(File.join(root, "docs/discourse.md"))[/^## Check a site\n.*?^```\n(.*?)^```$/m, 1].lines
    expect(shown.size).to be > 10
    expect(shown - check.last.lines).to eq([])
  end

  it "says per dialect whether reasoning goes back, as docs/discourse.md shows, and why not, exit status unchanged" do
    install_into(:newest)
    section = File.read(File.join(root, "docs/discourse.md"))[/^## Reasoning models.*?^## /m]
    shown = section[/^On the newest Discourse with the plugin:\n\n```\n(.*?)^```$/m, 1].lines
    expect(shown.size).to eq(6)
    expect(check.last.lines.each_cons(6).to_a).to include(shown)

    replay = true
    install_into(:newest, replay: -> { replay })
    replay = false
    status, out = check
    expect(status).to eq(0)
    expect(out).to include("  not in use now: switched off (install!'s replay:, " \
                           "the discourse_ai_stream_reasoning_replay setting)\n")
    install_into(:current, enabled: -> { false })
    expect(check.last).to include("Dialects::Vllm: Discourse AI's current generation: reasoning is read on the " \
                                  "newest only\n  not in use: the gem is switched off\n")
  end

  it "exits 2 when install! has not run: the stock processors are in use" do
    load_discourse_stand_ins(generation: :legacy)
    status, out = check
    expect(status).to eq(2)
    expect(tallies(out, "chat")).to eq([[2, 1, 2], [2, 1, 2], [3, 1, 3], [3, 1, 3]])
    expect(out).to include("install!: not run here",
                           "  discourse_ai_stream #{DiscourseAiStream::VERSION} is installed but not in use: " \
                           "install! has not run in this process.\n")
    expect(out).to end_with("The gem is not in use for every stock processor: see above.\n")
  end

  it "exits 2 when install!'s enabled: check (the site setting) is off" do
    install_into(:current, enabled: -> { false })
    status, out = check
    expect(status).to eq(2)
    expect(out).to include("  #{DiscourseAiStream::Discourse::STOCK_PROCESSOR}: replaced by the gem's, " \
                           "which is switched off: stock decodes\n")
    expect(out).to include("  discourse_ai_stream #{DiscourseAiStream::VERSION} is installed but switched off " \
                           "(install!'s enabled:, the discourse_ai_stream_enabled site setting), so Discourse's own " \
                           "processors decode every stream.\n",
                           "  What to do: #{DiscourseAiStream::DOCS}/troubleshooting.md#switched-off\n")
  end

  it "exits 2, saying why, when install! left a stock processor that grew in place" do
    load_discourse_stand_ins(generation: :newest)
    DiscourseAi::Completions::OpenAiResponsesMessageProcessor.class_eval { def cited_sources = [] }
    integration.install!
    status, out = check
    expect(status).to eq(2)
    expect(out).to include("  #{DiscourseAiStream::Discourse::STOCK_RESPONSES_PROCESSOR}: left stock: " \
                           "the gem's DiscourseAiStream::OpenAiResponsesMessageProcessor lacks #cited_sources")
  end

  it "exits 1 when a processor of the gem loses a call, whatever install! did" do
    install_into(:current)
    allow(DiscourseAiStream::BugReport).to receive(:streamed).and_wrap_original do |original, klass, *rest|
      klass == DiscourseAiStream::OpenAiMessageProcessor ? ["call_1"] : original.call(klass, *rest)
    end
    status, out = check
    expect(status).to eq(1)
    expect(tallies(out, "chat")).to eq([[2, 2, 1], [2, 2, 1], [3, 3, 1], [3, 3, 1]])
    expect(out).to end_with("THE GEM LOST A CALL: please report it, with this output.\n")
  end

  it "is described for rake -T with its exit status" do
    rake = Rake::Application.new
    rake.define_task(Rake::Task, :environment)
    Rake.with_application(rake) do
      Rake::TaskManager.record_task_metadata = true
      load File.join(root, "lib/tasks/discourse_ai_stream.rake")
    ensure
      Rake::TaskManager.record_task_metadata = false
    end
    expect(rake["discourse_ai_stream:check"].comment).to include("whether the gem replaced", "exit 0", "2: not in use")
  end

  # The task in a process of its own, as `rake discourse_ai_stream:check`
  # runs in the container: the app booted (Discourse, then the plugin's
  # install!), the task loaded as the railtie loads it, its exit status the
  # process's.
  it "runs as a rake task whose exit status is the process's" do
    script = <<~RUBY
      require #{File.join(root, "spec/support/discourse_stand_ins").dump}
      DiscourseStandIns.load_files(ARGV.first.to_sym)
      require "discourse_ai_stream"
      require "rake"
      DiscourseAiStream::Discourse.install! if ARGV.last == "install"
      Rake.application.define_task(Rake::Task, :environment)
      load #{File.join(root, "lib/tasks/discourse_ai_stream.rake").dump}
      Rake::Task["discourse_ai_stream:check"].invoke
    RUBY
    run = ->(*args) { Open3.capture3(RbConfig.ruby, "-I", File.join(root, "lib"), "-e", script, *args) }
    out, err, status = run.call("legacy", "install")
    expect(status.exitstatus).to eq(0), out + err
    expect(out).to include("chat, 3 calls, partial_tool_calls: true:", "stock 1 of 3, gem 3 of 3")
    _, err, status = run.call("newest", "none")
    expect(status.exitstatus).to eq(2), err
  end
end
