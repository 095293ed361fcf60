# frozen_string_literal: true

# Writes the Makefile that builds the Rust binding into discourse_ai_stream.so
# with cargo. It is the gem's own Makefile writer, not the rb_sys gem's
# create_rust_makefile: the same Makefile wherever the gem is built, whether
# or not the host happens to have rb_sys installed (RubyGems.org, which the
# rb_sys gem comes from, is out of this project's reach, so nothing here could
# test a build through it). The Makefile serves both callers:
#
# * `rake compile` (rake-compiler) runs this script in tmp/<platform>/..., then
#   `make` and `make install target_prefix=` with sitearchdir pointed at
#   lib/discourse_ai_stream/.
# * `gem install` runs it here, in the installed gem's ext dir, then
#   `make clean`, `make` and `make install DESTDIR=` with sitearchdir pointed at
#   a temporary dir that RubyGems moves into the gem's extension dir.
#
# Environment read when `make` runs (not only now):
#   CARGO                 the cargo binary (default: cargo on PATH)
#   RB_SYS_CARGO_PROFILE  cargo profile, `release` by default; `dev` = debug build
#   CARGO_TARGET_DIR      cargo's build dir (default: see default_target_dir below)

require "mkmf"

EXT_NAME = "discourse_ai_stream"

cargo = ENV.fetch("CARGO", "cargo")
cargo_found = cargo.include?(File::SEPARATOR) ? File.executable?(cargo) : find_executable(cargo)
unless cargo_found
  abort <<~MSG
    #{EXT_NAME}: `#{cargo}` not found. Building this gem from source compiles its Rust
    core, so it needs a Rust toolchain (cargo and rustc) on this machine: install one
    (e.g. with rustup), or point the CARGO environment variable at cargo.
  MSG
end

src_dir = File.expand_path(__dir__)
# The cargo workspace: the repository root, or the installed gem's root.
workspace = File.expand_path("../..", src_dir)

# Out of tree (rake-compiler's tmp/ dir) the build shares the workspace's
# target/ with the cargo commands run in the workspace. In tree (`gem install`) it
# uses a private target/ next to this file, which `make install` deletes once
# the .so is installed: an installed gem should not keep hundreds of MB of
# build cache. A CARGO_TARGET_DIR from the environment is always kept.
in_tree = File.realpath(Dir.pwd) == File.realpath(src_dir)
default_target_dir = in_tree ? File.join(src_dir, "target") : File.join(workspace, "target")

dlext = RbConfig::CONFIG["DLEXT"]
# What cargo names a cdylib: libNAME.so on Linux, libNAME.dylib on macOS.
rustlib = if Gem.win_platform?
            "#{EXT_NAME}.dll"
          else
            "lib#{EXT_NAME}.#{RbConfig::CONFIG["SOEXT"]}"
          end

File.write("Makefile", <<~MAKEFILE)
  # Written by #{src_dir}/extconf.rb. GNU make.
  SHELL = /bin/sh

  RUBY = #{RbConfig.ruby}
  WORKSPACE = #{workspace}
  # Unset or empty in the environment (or on the command line) means the default.
  CARGO := $(or $(CARGO),cargo)
  RB_SYS_CARGO_PROFILE := $(or $(RB_SYS_CARGO_PROFILE),release)
  # Non-empty only for the private in-tree target dir, the one `make install` deletes.
  PRIVATE_TARGET_DIR := $(if $(CARGO_TARGET_DIR),,#{in_tree ? default_target_dir : ""})
  CARGO_TARGET_DIR := $(or $(CARGO_TARGET_DIR),#{default_target_dir})

  # cargo writes the dev profile to target/debug, every other profile to target/<name>.
  PROFILE_DIR = $(if $(filter dev,$(RB_SYS_CARGO_PROFILE)),debug,$(RB_SYS_CARGO_PROFILE))
  RUSTLIB = $(CARGO_TARGET_DIR)/$(PROFILE_DIR)/#{rustlib}
  DLLIB = #{EXT_NAME}.#{dlext}

  DESTDIR =
  sitearchdir = #{RbConfig::CONFIG["sitearchdir"]}
  target_prefix = /#{EXT_NAME}
  RUBYARCHDIR = $(DESTDIR)$(sitearchdir)$(target_prefix)

  # Replace $(2) by $(1) unless they are equal. Copy then rename, so a process
  # that has the old .so mapped keeps reading an intact file.
  copy_if_changed = cmp -s '$(1)' '$(2)' || { cp '$(1)' '$(2).tmp' && mv -f '$(2).tmp' '$(2)'; }

  all: $(DLLIB)

  # Always ask cargo: only it knows whether any Rust source (of either crate)
  # changed, and it does nothing when none did.
  $(DLLIB): FORCE
  \tRUBY='$(RUBY)' '$(CARGO)' build --manifest-path '$(WORKSPACE)/Cargo.toml' \\
  \t  -p #{EXT_NAME} --locked --profile '$(RB_SYS_CARGO_PROFILE)' --target-dir '$(CARGO_TARGET_DIR)'
  \t@$(call copy_if_changed,$(RUSTLIB),$@)

  install: $(DLLIB)
  \t@mkdir -p '$(RUBYARCHDIR)'
  \t@$(call copy_if_changed,$(DLLIB),$(RUBYARCHDIR)/$(DLLIB))
  \t@echo 'installed $(RUBYARCHDIR)/$(DLLIB)'
  \t$(if $(PRIVATE_TARGET_DIR),rm -rf '$(PRIVATE_TARGET_DIR)')

  # Forget the built extension so the next `make` produces it again. The cargo
  # cache stays: cargo rebuilds whatever is out of date by itself, and a
  # shared target dir would otherwise recompile every crate from scratch.
  clean:
  \trm -f '$(DLLIB)' '$(DLLIB).tmp'

  distclean: clean
  \t$(if $(PRIVATE_TARGET_DIR),rm -rf '$(PRIVATE_TARGET_DIR)')
  \trm -f Makefile mkmf.log

  .PHONY: all install clean distclean FORCE
  FORCE:
MAKEFILE

puts "creating Makefile (cargo build of #{EXT_NAME} in #{workspace})"
