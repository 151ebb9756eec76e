#!/bin/sh
# Start libvirtd the way this kind of machine needs it (see shared GUEST.md):
# no systemd, no udev, no virtlogd. Idempotent: safe to run before every test.
set -eu

log=${STOCKADE_LIBVIRTD_LOG:-/var/log/stockade-libvirtd.log}
sock=/var/run/libvirt/libvirt-sock
conf=/etc/libvirt/qemu.conf

if [ "$(id -u)" != 0 ]; then
	echo "libvirtd.sh: must run as root" >&2
	exit 1
fi

# Without udev /dev/kvm stays root:root 0600 and libvirt re-probes QEMU on
# many calls (seconds each). The group permission makes its capability cache stick.
if [ -e /dev/kvm ]; then
	chgrp kvm /dev/kvm 2>/dev/null || true
	chmod 0660 /dev/kvm
fi

# QEMU's stdio goes to plain files, so virtlogd is not needed.
if [ -f "$conf" ] && ! grep -Eq '^[[:space:]]*stdio_handler[[:space:]]*=[[:space:]]*"file"' "$conf"; then
	sed -i -E '/^[[:space:]]*stdio_handler[[:space:]]*=/d' "$conf"
	echo 'stdio_handler = "file"' >>"$conf"
fi

running() {
	pid=$(pidof libvirtd 2>/dev/null || true)
	[ -n "$pid" ] && [ -S "$sock" ]
}

if ! pidof libvirtd >/dev/null 2>&1; then
	mkdir -p "$(dirname "$log")"
	rm -f /var/run/libvirtd.pid
	# tini as subreaper reaps QEMU children at once; otherwise they wait for
	# this box's PID 1 and every destroy costs ~2 s.
	setsid tini -s -- /usr/sbin/libvirtd </dev/null >>"$log" 2>&1 &
fi

i=0
until running; do
	i=$((i + 1))
	if [ "$i" -gt 300 ]; then
		echo "libvirtd.sh: libvirtd did not open $sock within 30 s; see $log" >&2
		tail -n 20 "$log" >&2 || true
		exit 1
	fi
	sleep 0.1
done

# The first API call after start probes QEMU for 12-20 s: pay it here, not in a timed test.
virsh -c qemu:///system version >/dev/null
