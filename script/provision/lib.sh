# shellcheck shell=bash
# What the scripts of script/provision/ and bin/setup share, sourced by each
# before it changes directory. It sets ROOT (the checkout), ME (the script's
# path from there, which starts its messages) and CACHE, the directory
# outside the checkout where what they make is kept and reused:
#
#   ${DISCOURSE_AI_STREAM_CACHE:-~/.cache/discourse_ai_stream}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ME=$(realpath -s --relative-to="$ROOT" "$0")
# shellcheck disable=SC2034 # for the scripts that source this
CACHE="${DISCOURSE_AI_STREAM_CACHE:-${HOME:-/root}/.cache/discourse_ai_stream}"

say() { echo "$ME: $*" >&2; }
die() { say "error: $*"; exit 1; }
need_root() { [ "$(id -u)" -eq 0 ] || die "needs root ($*)"; }

# TOOL (cargo, rustc) of the machine's own Rust, from ~/.cargo/bin when it is
# not on PATH.
rust_on_path() {
  if ! command -v "$1" >/dev/null 2>&1 && [ -x "${HOME:-/nonexistent}/.cargo/bin/$1" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
}

installed() { [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" = "ii " ]; }

# Installs those of Debian's PACKAGES that are not installed (through sudo
# when not root); calls no apt-get when all are.
install_missing() {
  local missing=() package sudo=()
  for package in "$@"; do
    installed "$package" || missing+=("$package")
  done
  [ "${#missing[@]}" -eq 0 ] && return
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${missing[*]} by hand"
    sudo=(sudo)
  fi
  say "installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Makes PATH (a directory or a file) whole or not at all: COMMAND... makes
# PATH.part, given as its last argument, which then replaces PATH. What a
# stopped run leaves is a .part, never a half-made PATH.
make_whole() {
  local path=$1
  shift
  rm -rf "$path.part"
  mkdir -p "$(dirname "$path")"
  "$@" "$path.part"
  rm -rf "$path"
  mv "$path.part" "$path"
}

# make_whole for a Debian root, which mmdebstrap takes minutes to make
# (NOTE says how many): says so, and how long it took.
make_root() {
  local root=$1 note=$2 started=$SECONDS
  shift 2
  install_missing mmdebstrap arch-test
  say "making $root ($note)"
  make_whole "$root" "$@"
  say "made $root in $((SECONDS - started)) s"
}

# Fetches URL into FILE and checks it against SHA (SHA-256), dying with
# what to do when either fails.
fetch() {
  local url=$1 sha=$2 file=$3
  curl -fsSL --retry 3 -o "$file" "$url" || die "$url: not on Debian's mirror (any more?): update its pin in $ME"
  echo "$sha  $file" | sha256sum --check --status || die "$file: SHA-256 differs from its pin in $ME ($sha)"
}
