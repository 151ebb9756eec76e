#!/bin/sh
# Installs the Debian packages Stockade needs to build, run and test, when
# missing. Idempotent; quiet when everything is there.
set -eu
PKGS="gcc libc6-dev pkg-config libvirt-dev libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils
busybox-static crun tini postgresql debootstrap e2fsprogs xfsprogs squashfs-tools cpio xz-utils
chromium chromium-driver fonts-dejavu-core ca-certificates git"
missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
# Node.js and npm: tests drive Stockade with npm clients (pinned versions,
# installed by the tests). Checked as commands: a Node.js from elsewhere
# (NodeSource) carries its own npm.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	missing="$missing nodejs npm"
fi
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing Debian packages:$missing (run as root or install them)" >&2
		exit 1
	fi
	echo "deps: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	echo "deps: add /usr/local/go/bin to PATH" >&2
fi
