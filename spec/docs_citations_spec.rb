# frozen_string_literal: true

require_relative "spec_helper"

# What the code, specs and docs cite must resolve in a clone: each rule
# number cited exists in docs/stream-shapes.md, each anomaly kind the rulebook
# names exists in the core, no text points at a tracker a clone does not have
# or at a path outside the repository.
RSpec.describe "citations in the repository" do
  root = File.expand_path("..", __dir__)
  rulebook_path = File.join(root, "docs/stream-shapes.md")

  # Text files of the project: code, specs, docs, benchmarks, tools (this
  # spec aside: it spells out what it looks for). Build output, fuzz corpora
  # and recorded streams are data, not text to read.
  texts = lambda do
    dirs = %w[ext lib spec docs bench bin script examples fuzz rakelib exe .ci .github]
    files = dirs.flat_map { |dir| Dir.glob("#{dir}/**/*", File::FNM_DOTMATCH, base: root) }
    files += %w[README.md Rakefile Cargo.toml discourse_ai_stream.gemspec]
    skipped = %r{(\A|/)(target|corpus|artifacts|tmp)/|\.(sse|so|lock|proptest-regressions)\z}
    files.grep_v(skipped)
         .map { |f| File.join(root, f) }
         .select { |f| File.file?(f) && f != File.expand_path(__FILE__) }
         .to_h { |f| [f.delete_prefix("#{root}/"), File.read(f, encoding: "UTF-8")] }
         .select { |_, text| text.valid_encoding? }
  end.call

  # Every number a text cites as a rule: "rule 7", "rules 6, 8 and 14",
  # "rules 15 to 19", "Slotting 3", and test names such as `rules_5_8_14_...`.
  def cited_rules(text)
    words = text.scan(%r{\b(?:rules?|slotting)\s+(\d+(?:\s*(?:,|and|or|to|-|–|/)\s*\d+)*)}i).flatten
    names = text.scan(/\brules?_(\d+(?:_\d+)*)/i).flatten
    (words + names).flat_map { |list| list.scan(/\d+/).map(&:to_i) }
  end

  let(:rulebook) { File.read(rulebook_path) }
  let(:rule_numbers) { rulebook.scan(/^### (\d+)\. /).flatten.map(&:to_i) }

  it "numbers the rulebook's rules 1, 2, 3... with none missing or repeated" do
    expect(rule_numbers).not_to be_empty
    expect(rule_numbers).to eq((1..rule_numbers.size).to_a)
  end

  it "cites only rules the rulebook has" do
    unknown = texts.flat_map do |path, text|
      (cited_rules(text) - rule_numbers).uniq.map { |n| "#{path}: rule #{n}" }
    end
    expect(unknown).to be_empty, "rules cited that docs/stream-shapes.md lacks:\n#{unknown.join("\n")}"
  end

  it "names only anomaly kinds the core has in the rulebook's reports" do
    kinds = File.read(File.join(root, "ext/openai_stream/src/anomaly.rs")).scan(/= "([a-z_]+)",/).flatten
    reports = rulebook.scan(/^- \*\*Reports:\*\*(.*?)(?=^- \*\*|^#|\z)/m).flatten.join
    named = reports.scan(/`([a-z]+(?:_[a-z]+)*)`/).flatten.uniq
    expect(kinds).not_to be_empty
    expect(named).not_to be_empty
    expect(named - kinds).to be_empty, "not in AnomalyKind: #{(named - kinds).join(", ")}"
  end

  it "refers to no tracker entry by number" do
    # The word "issue" or "issues" followed by a number, also when the number
    # sits on the next comment line.
    tracker = %r{\bissues?\s*(?:\n\s*(?://[!/]?|#|\*)?\s*)?#?\d+}i
    cited = texts.flat_map { |path, text| text.scan(tracker).map { |hit| "#{path}: #{hit.inspect}" } }
    expect(cited).to be_empty, "say the reason or link a page instead of:\n#{cited.join("\n")}"
  end

  it "cites no path outside the repository" do
    outside = %r{\.\./shared\b|/work/shared\b|\bshared/docs/}
    cited = texts.flat_map { |path, text| text.scan(outside).map { |hit| "#{path}: #{hit}" } }
    escaping = texts.select { |path, _| path.end_with?(".md") }.flat_map do |path, text|
      text.scan(/\]\(([^)\s#]+)/).flatten.grep_v(/\A[a-z]+:/).filter_map do |link|
        target = File.expand_path(link, File.dirname(File.join(root, path)))
        "#{path}: #{link}" unless target == root || target.start_with?("#{root}/")
      end
    end
    expect(cited + escaping).to be_empty, "outside the repository:\n#{(cited + escaping).join("\n")}"
  end
end
