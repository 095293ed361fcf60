# frozen_string_literal: true

require "fileutils"
require "tmpdir"

# A throwaway PostgreSQL cluster for the audit's database specs and its
# benchmark: Debian's server binaries (postgresql-15), a data directory of
# its own under the system's temporary directory, no TCP (a Unix socket in a
# directory of its own), stopped and deleted by #stop, which `start`
# registers with at_exit before anything can fail. initdb refuses to run as
# root, so as root every server command runs as the unprivileged `nobody`
# through runuser.
class PostgresServer
  DEBIAN_BIN = "/usr/lib/postgresql/*/bin"
  RUN_AS = "nobody"
  # Nothing here is worth a fsync; the cluster is deleted at the end.
  SETTINGS = %w[fsync=off synchronous_commit=off full_page_writes=off listen_addresses=].freeze

  attr_reader :bin, :root, :port

  # The newest server version Debian installed, or nil.
  def self.debian_bin
    ENV.fetch("DISCOURSE_AI_STREAM_PG_BIN") do
      Dir[DEBIAN_BIN].select { |dir| File.executable?(File.join(dir, "initdb")) }
                     .max_by { |dir| dir[%r{/(\d+)/bin\z}, 1].to_i }
    end
  end

  def initialize(bin: self.class.debian_bin, port: 54_320 + (Process.pid % 1000))
    raise "no PostgreSQL server binaries under #{DEBIAN_BIN}: install Debian's postgresql package" unless bin

    @bin = bin
    @port = port
  end

  def socket_dir = File.join(root, "socket")
  def data_dir = File.join(root, "data")
  def log_file = File.join(root, "server.log")

  def connection_config(database: "postgres")
    { adapter: "postgresql", host: socket_dir, port: port, username: "postgres", database: database }
  end

  def start
    @root = Dir.mktmpdir("discourse_ai_stream-pg-")
    at_exit { stop }
    FileUtils.mkdir_p(socket_dir)
    FileUtils.chown_R(RUN_AS, nil, root) if Process.uid.zero?
    File.chmod(0o755, root)
    run("initdb", "-D", data_dir, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8",
        "--no-sync")
    options = ["-k", socket_dir, "-p", port.to_s, *SETTINGS.flat_map { |setting| ["-c", setting] }].join(" ")
    run("pg_ctl", "-D", data_dir, "-l", log_file, "-o", options, "-w", "-t", "60", "start")
    self
  end

  def stop
    return unless root && File.directory?(root)

    run("pg_ctl", "-D", data_dir, "-m", "immediate", "-w", "stop", check: false) if File.exist?(pid_file)
  ensure
    FileUtils.rm_rf(root) if root
  end

  def running?
    !root.nil? && File.exist?(pid_file)
  end

  private

  def pid_file = File.join(data_dir, "postmaster.pid")

  def run(tool, *args, check: true)
    command = [File.join(bin, tool), *args]
    command = ["runuser", "-u", RUN_AS, "--", *command] if Process.uid.zero?
    output = IO.popen(command, err: %i[child out], chdir: root, &:read)
    status = Process.last_status
    return if status.success? || !check

    log = File.exist?(log_file) ? File.read(log_file) : ""
    raise "#{tool} failed (#{status}):\n#{output}\n#{log}"
  end
end
