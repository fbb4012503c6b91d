#!/usr/bin/env bash
# Installs Debian packages for one purpose, as root or through sudo; the install-*.sh scripts
# call it once they have found something missing.
#   scripts/apt-install.sh "what they are for" PACKAGE...
set -euo pipefail
purpose=$1
shift
if ! command -v apt-get >/dev/null; then
    echo "no apt-get here: install $* (Debian names) with this system's package manager, for $purpose" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install $* (Debian) as root, for $purpose" >&2; exit 1; }
    sudo=sudo
fi
echo "installing $* (Debian packages) for $purpose"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
