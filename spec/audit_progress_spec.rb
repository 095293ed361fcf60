# frozen_string_literal: true

RSpec.describe DiscourseAiStream::Audit::Progress do
  let(:io) { StringIO.new }
  let(:time) { [100.0] }
  let(:clock) { -> { time.first } }

  def progress(tty:, total: 1000, every: 250)
    described_class.new(io: io, total: total, every: every, tty: tty, clock: clock)
  end

  def after_seconds(seconds)
    time[0] += seconds
  end

  context "when stderr is no terminal" do
    it "prints a line every N rows with the rate and the time left, then one for the run" do
      bar = progress(tty: false)
      after_seconds(2)
      200.times { bar.advance }
      expect(io.string).to eq("")
      50.times { bar.advance }
      after_seconds(3)
      bar.advance(260)
      expect(io.string.lines.map(&:chomp)).to eq([
                                                   "discourse_ai_stream audit: 250 of 1000 rows (25%), 125 rows/s, " \
                                                   "6s left",
                                                   "discourse_ai_stream audit: 510 of 1000 rows (51%), 102 rows/s, " \
                                                   "5s left"
                                                 ])
      bar.finish
      expect(io.string.lines.last).to eq("discourse_ai_stream audit: 510 rows in 5s (102 rows/s)\n")
    end

    it "writes minutes and hours, and grows the total when rows are added while it runs" do
      bar = progress(tty: false, total: 10, every: 10)
      after_seconds(600)
      bar.advance(5)
      expect(bar.line).to eq("discourse_ai_stream audit: 5 of 10 rows (50%), 0 rows/s, 10m00s left")
      bar.advance(10)
      expect(bar.total).to eq(15)
      expect(bar.line).to eq("discourse_ai_stream audit: 15 of 15 rows (100%), 0 rows/s, 0s left")
      after_seconds(7200)
      bar.finish
      expect(io.string.lines.last).to eq("discourse_ai_stream audit: 15 rows in 2h10m (0 rows/s)\n")
    end
  end

  context "when stderr is a terminal" do
    it "redraws one line at most every quarter second and clears it at the end" do
      bar = progress(tty: true)
      after_seconds(1)
      bar.advance(100)
      bar.advance(100)
      after_seconds(0.25)
      bar.advance(100)
      expect(io.string).to eq("\rdiscourse_ai_stream audit: 100 of 1000 rows (10%), 100 rows/s, 9s left\e[K" \
                              "\rdiscourse_ai_stream audit: 300 of 1000 rows (30%), 240 rows/s, 3s left\e[K")
      bar.finish
      expect(io.string).to end_with("\e[K\r\e[Kdiscourse_ai_stream audit: 300 rows in 1s (240 rows/s)\n")
    end

    it "says nothing of the time left before any time has passed" do
      bar = progress(tty: true)
      bar.advance(1)
      expect(io.string).to eq("\rdiscourse_ai_stream audit: 1 of 1000 rows (0%), 0 rows/s\e[K")
    end
  end
end
