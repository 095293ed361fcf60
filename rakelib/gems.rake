# frozen_string_literal: true

# The gems bin/build-gems writes to pkg/: the source gem (compiles the Rust
# code when installed) and one precompiled gem per platform of
# PlatformGem::RUBIES, which carries one release build per Ruby minor in
# lib/discourse_ai_stream/X.Y/ and installs with no compiler at all.
#
# rake-compiler's `native`/`cross` tasks would build a platform gem from
# cross-compiled binaries (a cross rbconfig per Ruby, the rb_sys gem or its
# docker images). Here bin/build-gems makes the builds (natively on each Ruby
# of the matrix, or cross-compiled in a Debian build root) into
# tmp/gems/PLATFORM/, and this task only packages them, the way
# rake-compiler's native task does: the gemspec with the platform set, no
# `extensions`, no Rust sources, the binaries added and
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

  desc "Package pkg/discourse_ai_stream-VERSION-PLATFORM.gem from the builds in tmp/gems/PLATFORM/"
  task :platform, [:platform] => "pkg" do |_task, args|
    platform = args.fetch(:platform) { abort "which platform? rake gems:platform[x86_64-linux]" }
    stage = format(PlatformGem::STAGE, platform)
    spec = PlatformGem.spec(GEMSPEC, platform)
    PlatformGem::RUBIES.fetch(platform).each do |minor|
      build = File.join(stage, format(PlatformGem::BUILD, minor))
      abort "#{build} missing: run bin/build-gems" unless File.file?(build)
      info = PlatformGem.check_library(build, platform)
      puts "#{platform} #{minor}: needs #{info[:needed].join(", ")}; newest glibc symbol GLIBC_#{info[:glibc]}"
    end
    path = PlatformGem.build(spec, GEMSPEC, stage)
    mv path, "pkg/#{File.basename(path)}"
    puts "pkg/#{File.basename(path)} (Ruby #{PlatformGem::RUBIES.fetch(platform).join(", ")})"
  end
end
