# frozen_string_literal: true

require_relative "spec_helper"
require "stringio"
require_relative "../examples/repro"

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

  it "has no broken relative link, to a file or to a heading" do
    [readme_path, *pages].each do |source|
      relative_links(File.read(source)).each do |link|
        path, anchor = link.split("#", 2)
        target = path.empty? ? source : File.expand_path(path, File.dirname(source))
        expect(File.exist?(target)).to be(true), "#{source}: #{link}"
        expect(anchors(File.read(target))).to include(anchor), "#{source}: #{link}" if anchor
      end
    end
  end

  it "gives the example plugin's own lines for installing it in Discourse" do
    plugin = File.read(File.join(root, "examples/discourse-plugin/plugin.rb"))
    gem_line = plugin[/^gem "discourse_ai_stream", "[^"]+"$/]
    expect(gem_line).to eq(%(gem "discourse_ai_stream", "#{DiscourseAiStream::VERSION}"))
    expect(readme).to include(gem_line, "reloadable_patch { DiscourseAiStream::Discourse.install! }",
                              "discourse_ai_stream-#{DiscourseAiStream::VERSION}-x86_64-linux.gem",
                              "examples/discourse-plugin/README.md")
  end

  it "shows lines bin/repro prints" do
    io = StringIO.new
    Repro.report(io)
    block = readme[%r{^## What `bin/repro` prints\n\n```\n(.*?)```}m, 1]
    shown = block.lines.map(&:chomp) - ["..."]
    expect(shown.size).to be > 5
    expect(shown - io.string.lines.map(&:chomp)).to eq([])
  end
end
