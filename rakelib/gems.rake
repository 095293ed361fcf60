# frozen_string_literal: true

# The two gems bin/build-gems writes to pkg/: the source gem (compiles the
# Rust code when installed) and the precompiled x86_64-linux gem, which
# carries one release build per Ruby minor in lib/discourse_ai_stream/X.Y/
# and installs with no compiler at all.
#
# rake-compiler's `native`/`cross` tasks would build the platform gem from
# cross-compiled binaries (a cross rbconfig per Ruby, the rb_sys gem or its
# docker images). Here every Ruby of the matrix is on the machine (script/provision/rubies),
# so each compiles natively (`rake compile` under bin/with-ruby) and this task
# only packages, the way rake-compiler's native task does: the gemspec with
# the platform set, no `extensions`, no Rust sources, the binaries added and
# `required_ruby_version` narrowed to the Rubies inside.

require_relative "platform_gem"

namespace :gems do
  directory "pkg"

  desc "Build pkg/discourse_ai_stream-VERSION.gem (the source gem)"
  task source: "pkg" do
    path = Gem::Package.build(GEMSPEC.dup)
    mv path, "pkg/#{File.basename(path)}"
    puts "pkg/#{File.basename(path)}"
  end

  desc "Package pkg/discourse_ai_stream-VERSION-x86_64-linux.gem from the builds in lib/discourse_ai_stream/X.Y/"
  task platform: "pkg" do
    minors = PlatformGem.minors
    abort "no builds in #{format(PlatformGem::BUILD, "X.Y")}: run bin/build-gems" if minors.empty?
    minors.each do |minor|
      info = PlatformGem.check_library(format(PlatformGem::BUILD, minor))
      puts "#{minor}: needs #{info[:needed].join(", ")}; newest glibc symbol GLIBC_#{info[:glibc]}"
    end
    path = Gem::Package.build(PlatformGem.spec(GEMSPEC, minors))
    mv path, "pkg/#{File.basename(path)}"
    puts "pkg/#{File.basename(path)} (Ruby #{minors.join(", ")})"
  end
end
