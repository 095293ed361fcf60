# frozen_string_literal: true

require_relative "spec_helper"
require_relative "../examples/repro"
require_relative "support/child_process"
require_relative "support/audit_database"

# The README is the first screen a newcomer reads: the two commands first,
# short, and a link to each page of docs/, where the reference lives.
RSpec.describe "README.md and docs/" do
  root = File.expand_path("..", __dir__)
  readme_path = File.join(root, "README.md")
  pages = Dir[File.join(root, "docs/*.md")]

  let(:readme) { File.read(readme_path) }

  # GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes.
  def anchors(text)
    text.scan(/^#+ (.+)$/).map { |(heading)| heading.downcase.gsub(/[^a-z0-9 _-]/, "").tr(" ", "-") }
  end

  def relative_links(text)
    text.scan(/\]\(([^)\s]+)\)/).flatten.grep_v(%r{\A[a-z]+://})
  end

  it "starts with the two commands, exactly" do
    expect(readme.lines.first(2)).to eq(["bin/repro\n", "bin/test\n"])
  end

  it "stays under 200 lines" do
    expect(readme.lines.size).to be < 200
  end

  it "links to every page of docs/" do
    expect(pages).not_to be_empty
    linked = relative_links(readme).map { |link| File.expand_path(link.split("#").first, root) }
    expect(pages - linked).to eq([])
  end

  it "opens each page of docs/ with the question it answers" do
    pages.each do |page|
      expect(File.readlines(page).first).to match(/\A# .+\?\n\z/), page
    end
  end

  it "has no broken relative link, to a file or to a heading (the example plugin's README and the changelog too)" do
    others = %w[examples/discourse-plugin/README.md CHANGELOG.md].map { |path| File.join(root, path) }
    [readme_path, *pages, *others].each do |source|
      relative_links(File.read(source)).each do |link|
        path, anchor = link.split("#", 2)
        target = path.empty? ? source : File.expand_path(path, File.dirname(source))
        expect(File.exist?(target)).to be(true), "#{source}: #{link}"
        expect(anchors(File.read(target))).to include(anchor), "#{source}: #{link}" if anchor
      end
    end
  end

  it "gives the example plugin's own code for installing it in Discourse, and says first that no release exists" do
    plugin = File.read(File.join(root, "examples/discourse-plugin/plugin.rb"))
    code = plugin.lines.grep_v(/\A\s*#/).join.strip.squeeze("\n")
    gem_line = %(gem "discourse_ai_stream", "#{DiscourseAiStream::VERSION}", require_name: "discourse_ai_stream/host")
    expect(code).to start_with("#{gem_line}\n")
    shown = readme[/^The plugin's `plugin.rb` is.*?```ruby\n(.*?)```/m, 1]
    expect(shown.strip.squeeze("\n")).to eq(code)
    expect(readme).to include("discourse_ai_stream-#{DiscourseAiStream::VERSION}-x86_64-linux.gem",
                              "examples/discourse-plugin/README.md")
    expect(readme.index("No release is on rubygems.org yet")).to be < readme.index("**Install**")
  end

  it "answers am I affected, install, check, count, switch off and remove on its first screen" do
    first_screen = readme.lines.first(50).join
    ["**Am I affected?**", "**Install**", "**Check**", "**Count**", "**Switch off**", "**Remove**"].each do |item|
      expect(first_screen).to include(item)
    end
  end

  it "runs its example of the gem outside Discourse as written, on a real SSE body, printing what it shows" do
    section = readme[/^## Use it without Discourse\n(.*?)^## /m, 1]
    code, printed = section.scan(/^```(?:ruby)?\n(.*?)^```$/m).flatten
    expect(code).to include("<<~'SSE'", "data: [DONE]")
    output = ChildProcess.run!({}, RbConfig.ruby, "-I", File.join(root, "lib"), "-e", code)
    expect(output).to eq(printed)
  end

  it "names no command that needs a file under /tmp" do
    [readme_path, *pages].each do |source|
      expect(File.read(source)).not_to match(%r{\s/tmp/}), source
    end
  end

  it "shows a Responses API processor built with keywords that run as written" do
    code = File.read(File.join(root, "docs/responses-api.md"))[/^```ruby\n(.*?)^```$/m, 1]
    expect(code).to include("OpenAiResponsesMessageProcessor.new(")
    expect(eval(code, binding, "docs/responses-api.md")) # rubocop:disable Security/Eval
      .to be_a(DiscourseAiStream::OpenAiResponsesMessageProcessor)
  end

  it "exports for the audit the rows of every provider it reads, for a period" do
    query = File.read(File.join(root, "docs/audit.md"))[/`psql -At -c "(select row_to_json.*?)" discourse/, 1]
    ids = query[/provider_id in \(([\d, ]+)\)/, 1].split(",").map(&:to_i)
    read = DiscourseAiStream::Audit::PROVIDERS.map { |name| AuditDatabase::PROVIDERS.fetch(name.to_sym) }
    expect(ids).to match_array(read)
    expect(query).to match(/created_at >= /)
  end

  it "keeps a changelog with a section for this version" do
    changelog = File.read(File.join(root, "CHANGELOG.md"))
    expect(changelog).to match(/^## #{Regexp.escape(DiscourseAiStream::VERSION)}\b/)
  end

  it "shows lines bin/repro prints" do
    io = StringIO.new
    Repro.report(io)
    block = readme[%r{`bin/repro` prints:\n\n```\n(.*?)```}m, 1]
    shown = block.lines.map(&:chomp) - ["..."]
    expect(shown.size).to be > 5
    expect(shown - io.string.lines.map(&:chomp)).to eq([])
  end
end
