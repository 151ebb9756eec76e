#!/bin/sh
# A private libvirtd for fault tests that stop and restart it: its own
# socket, state, config and domains, so the shared system libvirtd (and
# everyone's VMs on it) is never touched.
#
#   scripts/libvirtd-private.sh start DIR [PORT]  prints its URI
#   scripts/libvirtd-private.sh restart DIR       SIGTERM, wait, start again
#   scripts/libvirtd-private.sh stop DIR          destroys its domains, stops it
#   scripts/libvirtd-private.sh kill DIR          SIGKILL libvirtd and its QEMUs
#                                                 (a host that dies), keeps DIR
#
# With PORT it also listens on qemu+tcp://127.0.0.1:PORT/system (no auth,
# bound to 127.0.0.1 only: a second "host" for multi-host tests) and prints
# that URI instead; the port is remembered in DIR/tcp_port for restart.
#
# It runs privileged (qemu:///system semantics) inside a mount namespace
# whose /etc/libvirt, /var/lib/libvirt, /var/cache/libvirt, /var/log/libvirt
# and /run/libvirt are DIR's own; only its socket, DIR/sock/libvirt-sock,
# is reached from outside. QEMU pid files are under
# /proc/$(cat DIR/holder.pid)/root/run/libvirt/qemu/.
set -eu

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
	echo "usage: $0 start|restart|stop|kill DIR [PORT]" >&2
	exit 2
fi
port=${3:-}
case "$port" in
'' | *[!0-9]*) [ -z "$port" ] || {
	echo "libvirtd-private.sh: PORT must be a number" >&2
	exit 2
} ;;
esac
if [ "$(id -u)" != 0 ]; then
	echo "libvirtd-private.sh: must run as root" >&2
	exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sock=$dir/sock/libvirt-sock
uri="qemu+unix:///system?socket=$sock"
if [ -z "$port" ] && [ -f "$dir/tcp_port" ]; then port=$(cat "$dir/tcp_port"); fi

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

holder() {
	if alive "$dir/holder.pid"; then
		return
	fi
	mkdir -p "$dir/etc" "$dir/lib" "$dir/cache" "$dir/log" "$dir/sock" "$dir/run"
	for f in /etc/libvirt/*.conf; do cp "$f" "$dir/etc/"; done
	[ -d /etc/libvirt/nwfilter ] && cp -r /etc/libvirt/nwfilter "$dir/etc/" 2>/dev/null || true
	cat >>"$dir/etc/libvirtd.conf" <<CONF
unix_sock_dir = "$dir/sock"
unix_sock_rw_perms = "0700"
unix_sock_ro_perms = "0700"
auth_unix_rw = "none"
auth_unix_ro = "none"
# Agent channels stream over the client connections: more requests in
# flight than the default 5 before libvirtd stops reading a client (and its
# keepalive times out under load).
max_client_requests = 64
CONF
	if [ -n "$port" ]; then
		echo "$port" >"$dir/tcp_port"
		cat >>"$dir/etc/libvirtd.conf" <<CONF
listen_tls = 0
listen_tcp = 1
listen_addr = "127.0.0.1"
tcp_port = "$port"
auth_tcp = "none"
CONF
	fi
	# The namespace lives as long as this sleeper.
	setsid unshare -m --propagation private sh -c '
		d=$1
		mount --bind "$d/etc" /etc/libvirt
		mount --bind "$d/lib" /var/lib/libvirt
		mount --bind "$d/cache" /var/cache/libvirt
		mount --bind "$d/log" /var/log/libvirt
		mount -t tmpfs tmpfs /run/libvirt
		echo $$ >"$d/holder.pid.tmp"
		mv "$d/holder.pid.tmp" "$d/holder.pid"
		exec sleep infinity' sh "$dir" </dev/null >>"$dir/holder.log" 2>&1 &
	i=0
	until alive "$dir/holder.pid"; do
		i=$((i + 1))
		if [ "$i" -gt 100 ]; then
			echo "libvirtd-private.sh: mount namespace not ready; see $dir/holder.log" >&2
			exit 1
		fi
		sleep 0.1
	done
}

start() {
	holder
	if ! alive "$dir/run/libvirtd.pid"; then
		rm -f "$dir/run/libvirtd.pid" "$sock"
		listen=
		[ -z "$port" ] || listen=--listen
		nsenter -t "$(cat "$dir/holder.pid")" -m -- \
			setsid tini -s -- /usr/sbin/libvirtd $listen -p "$dir/run/libvirtd.pid" </dev/null >>"$dir/libvirtd.log" 2>&1 &
	fi
	i=0
	until [ -S "$sock" ] && alive "$dir/run/libvirtd.pid"; do
		i=$((i + 1))
		if [ "$i" -gt 300 ]; then
			echo "libvirtd-private.sh: libvirtd did not open $sock within 30 s; see $dir/libvirtd.log" >&2
			tail -n 20 "$dir/libvirtd.log" >&2 || true
			exit 1
		fi
		sleep 0.1
	done
	virsh -c "$uri" version >/dev/null # pays the first QEMU probe here
	if [ -n "$port" ]; then
		tcp="qemu+tcp://127.0.0.1:$port/system"
		i=0
		until virsh -c "$tcp" version >/dev/null 2>&1; do
			i=$((i + 1))
			if [ "$i" -gt 100 ]; then
				echo "libvirtd-private.sh: libvirtd does not answer on $tcp; see $dir/libvirtd.log" >&2
				exit 1
			fi
			sleep 0.1
		done
		uri=$tcp
	fi
	echo "$uri"
}

# killd kills libvirtd and every QEMU it started with SIGKILL: the host
# dies, nothing is cleaned up. The QEMUs are found by their pid files in the
# namespace's /run/libvirt/qemu.
killd() {
	if alive "$dir/holder.pid"; then
		for f in /proc/$(cat "$dir/holder.pid")/root/run/libvirt/qemu/*.pid; do
			[ -f "$f" ] || continue
			kill -KILL "$(cat "$f")" 2>/dev/null || true
		done
	fi
	if alive "$dir/run/libvirtd.pid"; then
		pid=$(cat "$dir/run/libvirtd.pid")
		kill -KILL "$pid" 2>/dev/null || true # it may die with its QEMUs first
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	fi
}

stopd() {
	if alive "$dir/run/libvirtd.pid"; then
		pid=$(cat "$dir/run/libvirtd.pid")
		kill -TERM "$pid"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	fi
}

case "$cmd" in
start) start ;;
restart)
	stopd
	start
	;;
kill) killd ;;
stop)
	if alive "$dir/run/libvirtd.pid"; then
		for d in $(virsh -c "$uri" list --all --name 2>/dev/null); do
			virsh -c "$uri" destroy "$d" >/dev/null 2>&1 || true
			virsh -c "$uri" undefine "$d" --nvram >/dev/null 2>&1 || virsh -c "$uri" undefine "$d" >/dev/null 2>&1 || true
		done
	fi
	stopd
	if alive "$dir/holder.pid"; then kill "$(cat "$dir/holder.pid")"; fi
	rm -f "$dir/holder.pid"
	;;
*)
	echo "usage: $0 start|restart|stop|kill DIR [PORT]" >&2
	exit 2
	;;
esac
