# frozen_string_literal: true

# Preloaded (ruby -r) by spec/extconf_spec.rb: makes `require "rb_sys/mkmf"`
# fail as it does where the rb_sys gem is not installed, so extconf.rb writes
# its own Makefile even on a machine that has rb_sys.
module Kernel
  alias require_without_rb_sys require

  def require(name)
    raise LoadError, "cannot load such file -- #{name} (hidden by spec)" if name.start_with?("rb_sys")

    require_without_rb_sys(name)
  end
  private :require
end
