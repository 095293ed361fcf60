# frozen_string_literal: true

# Forwards every call to a processor with GC.stress on during the call: a full
# collection at each allocation the native code makes, so a Ruby object it
# holds without marking it is freed at once.
class StressedProcessor < BasicObject
  def initialize(processor)
    @processor = processor
  end

  def method_missing(name, *args, &)
    was = ::GC.stress
    ::GC.stress = true
    @processor.__send__(name, *args, &)
  ensure
    ::GC.stress = was
  end

  def respond_to_missing?(name, include_private = false)
    @processor.respond_to?(name, include_private)
  end
end
