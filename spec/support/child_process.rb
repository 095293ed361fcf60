# frozen_string_literal: true

require "open3"
require "rbconfig"

# Commands run in a child process (a fresh Ruby, gem, make), as a user's
# shell would run them: without this process's Bundler (its
# RUBYOPT=-rbundler/setup would put this checkout's lib/ on the child's load
# path) and with `env` on top. Returns what the command printed; raises with
# it when the command fails.
module ChildProcess
  module_function

  # `timeout:` seconds: a command still running then is killed and fails
  # (a hang).
  def run!(env, *command, chdir: Dir.pwd, timeout: nil)
    output, status = unbundled do
      Open3.popen2e({ "RUBYOPT" => nil, "RUBYLIB" => nil }.merge(env), *command, chdir: chdir) do |stdin, out, wait|
        stdin.close
        reader = Thread.new { out.read }
        Process.kill("KILL", wait.pid) unless wait.join(timeout)
        [reader.value, wait.value]
      end
    end
    raise "`#{command.join(" ")}` failed or hung (#{status}):\n#{output}" unless status.success?

    output
  end

  # A Ruby script run by this Ruby: the last line it printed.
  def ruby!(env, *args, chdir: Dir.pwd)
    run!(env, RbConfig.ruby, *args, chdir: chdir).lines.last.to_s.strip
  end

  def unbundled(&)
    defined?(Bundler) ? Bundler.with_unbundled_env(&) : yield
  end
end
