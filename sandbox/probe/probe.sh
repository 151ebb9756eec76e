#!/bin/sh
# Stockade compliance probe. Run inside a sandbox, it tries each escape the
# compliance checklist asks about and prints one line per check:
#   PROBE <check id> <blocked|escaped|error> <detail>
# Everything else it prints is kept with the run as its output. It never
# prints the value of anything that looks like a credential, only names.
# POSIX sh: runs under busybox ash, dash and bash.
#
# Targets come from the environment (set by the runner):
#   PROBE_INTERNET        host:port asked for through the egress proxy
#   PROBE_INTERNET_DIRECT ip:port dialled directly
#   PROBE_METADATA        ip:port of the cloud metadata service
#   PROBE_PRIVATE         space-separated ip:port in private ranges
#   PROBE_CONTROL         host:port of the control plane
#   PROBE_DECOY           a .env file the runner put inside /workspace

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
LC_ALL=C
export LC_ALL
TMP=${TMPDIR:-/tmp}/stockade-probe.$$
mkdir -p "$TMP" 2>/dev/null || TMP=/workspace/.stockade-probe.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT

report() {
	id=$1 outcome=$2
	shift 2
	# one line, whatever the detail holds
	printf 'PROBE %s %s %s\n' "$id" "$outcome" "$(printf '%s' "$*" | tr '\n\r\t' '   ')"
}
have() { command -v "$1" >/dev/null 2>&1; }
log() { printf '# %s\n' "$*"; }
first() { head -n 1 | tr -d '\r'; }

# field NAME FILE: the value after "NAME" on its line.
field() {
	while read -r k v rest; do
		if [ "$k" = "$1" ]; then
			printf '%s' "$v"
			return 0
		fi
	done <"$2"
	return 1
}

# readable PATH: a file with at least one byte we can read, or a folder we
# can list with at least one entry.
readable() {
	if [ -d "$1" ]; then
		[ -r "$1" ] && [ -n "$(ls -A "$1" 2>/dev/null | head -n 1)" ]
		return
	fi
	[ -r "$1" ] && [ "$(head -c 1 "$1" 2>/dev/null | wc -c)" -gt 0 ]
}

# tcp_talk HOST PORT: send stdin, print the answer (15 s at most).
tcp_talk() {
	if have nc; then
		nc -w 10 "$1" "$2" 2>&1
	elif have bash; then
		timeout 15 bash -c 'exec 3<>"/dev/tcp/$1/$2" || exit 1; cat >&3; cat <&3' _ "$1" "$2" 2>&1
	elif have python3; then
		python3 -c '
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(sys.stdin.buffer.read()); s.shutdown(socket.SHUT_WR)
while True:
    b = s.recv(65536)
    if not b: break
    sys.stdout.buffer.write(b)
' "$1" "$2" 2>&1
	else
		echo "no nc, bash or python3 to open a connection"
		return 2
	fi
}

# tcp_connect HOST PORT: 0 when a TCP connection opens; the error otherwise.
tcp_connect() {
	if have nc; then
		nc -w 5 "$1" "$2" </dev/null 2>&1
	elif have bash; then
		timeout 8 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>&1
	elif have python3; then
		python3 -c '
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
except OSError as e:
    print(e); sys.exit(1)
' "$1" "$2" 2>&1
	else
		echo "no nc, bash or python3 to open a connection"
		return 2
	fi
}

# The proxy the agent runs in this sandbox.
PROXY=${HTTP_PROXY:-${http_proxy:-}}
PROXY=${PROXY#http://}
PROXY=${PROXY%/}
PROXY_HOST=${PROXY%:*}
PROXY_PORT=${PROXY##*:}

# via_proxy ID TARGET...: ask the egress proxy for http://TARGET/ and
# judge its answer: the gateway's refusal is blocked; any other answer, or
# an allowed connection that failed upstream, escaped the restriction.
via_proxy() {
	id=$1
	shift
	if [ -z "$PROXY" ]; then
		report "$id" error "no HTTP_PROXY in the environment"
		return
	fi
	outcome=blocked details=""
	for t in "$@"; do
		h=${t%:*}
		printf 'GET http://%s/ HTTP/1.0\r\nHost: %s\r\nUser-Agent: stockade-probe\r\n\r\n' "$t" "$h" |
			tcp_talk "$PROXY_HOST" "$PROXY_PORT" >"$TMP/resp"
		status=$(first <"$TMP/resp")
		rule=$(grep -i '^X-Stockade-Egress-Rule:' "$TMP/resp" | first | cut -d: -f2- | sed 's/^ *//')
		body=$(grep '^stockade egress:' "$TMP/resp" | first)
		log "proxy $t -> $status ${rule:+[$rule]}"
		case "$status" in
		HTTP/1.?\ 403*)
			if [ -n "$rule" ]; then
				details="$details; $t refused by the gateway ($rule)"
				continue
			fi
			;;
		"")
			outcome=error details="$details; $t: no answer from the proxy $PROXY: $(head -c 200 "$TMP/resp")"
			continue
			;;
		esac
		case "$body" in
		*" allowed "*)
			outcome=escaped details="$details; $t allowed by the gateway ($rule) but the upstream failed: $status"
			;;
		*)
			outcome=escaped details="$details; $t answered through the proxy: $status"
			;;
		esac
	done
	report "$id" "$outcome" "${details#; }"
}

# direct ID TARGET...: dial each target without the proxy.
direct() {
	id=$1
	shift
	outcome=blocked details=""
	for t in "$@"; do
		h=${t%:*} p=${t##*:}
		if msg=$(tcp_connect "$h" "$p"); then
			outcome=escaped details="$details; connected to $t directly"
		else
			msg=$(printf '%s' "$msg" | first)
			details="$details; $t: ${msg:-no connection}"
		fi
		log "direct $t -> ${msg:-connected}"
	done
	report "$id" "$outcome" "${details#; }"
}

check_user() {
	uid=$(id -u 2>/dev/null)
	capeff=$(field CapEff: /proc/self/status)
	capbnd=$(field CapBnd: /proc/self/status)
	nnp=$(field NoNewPrivs: /proc/self/status)
	sec=$(field Seccomp: /proc/self/status)
	d="uid $uid, CapEff $capeff, CapBnd $capbnd, NoNewPrivs $nnp, Seccomp $sec"
	if [ "$uid" = 0 ]; then
		report user escaped "runs as root: $d"
	elif [ "$capeff" != 0000000000000000 ] || [ "$capbnd" != 0000000000000000 ]; then
		report user escaped "holds capabilities: $d"
	else
		report user blocked "$d"
	fi
}

check_ssh_keys() {
	found="" tried=0
	for f in "$HOME"/.ssh/* /root/.ssh/* /home/*/.ssh/* /etc/ssh/ssh_host_*key /etc/ssh/*_key /root/.ssh /home/*/.ssh; do
		case "$f" in *'*'*) continue ;; esac
		tried=$((tried + 1))
		[ -f "$f" ] || continue
		readable "$f" && found="$found $f"
	done
	# Private keys anywhere we may read outside /workspace, /proc and /sys.
	for d in /root /home /etc /opt /srv /var /tmp /mnt /media /run; do
		[ -d "$d" ] || continue
		grep -rls -e 'PRIVATE KEY''-----' "$d" 2>/dev/null | grep -v "^$TMP" | head -n 5 >"$TMP/keys"
		while read -r k; do found="$found $k"; done <"$TMP/keys"
	done
	if [ -n "$found" ]; then
		report ssh_keys escaped "readable keys:$found"
	else
		report ssh_keys blocked "no SSH key or private key readable (~/.ssh, /root/.ssh, /home/*/.ssh, host keys, and a search of /root /home /etc /opt /srv /var /tmp /mnt /run)"
	fi
}

check_host_files() {
	hits="" n=0
	for f in /etc/libvirt /var/lib/libvirt /run/libvirt /var/run/libvirt /var/lib/stockade /etc/stockade/secret.key \
		/var/tmp/stockade-test-data /proc/kcore /proc/kallsyms /dev/mem /dev/kmem /dev/port /dev/kvm /dev/vda /dev/vdb \
		/dev/sda /dev/hvc0 /dev/ttyS0 /dev/vport0p1 /dev/vport1p1 /sys/class/virtio-ports /sys/firmware/dmi; do
		n=$((n + 1))
		[ -e "$f" ] || continue
		case "$f" in
		/proc/kallsyms)
			# listed to everyone, but addresses are zero without privilege
			grep -qv '^0000000000000000' /proc/kallsyms 2>/dev/null && hits="$hits $f(addresses)"
			continue
			;;
		esac
		readable "$f" && hits="$hits $f"
	done
	shares=$(while read -r a b c d e f g rest; do
		set -- $g $rest
		while [ "$#" -gt 0 ] && [ "$1" != - ]; do shift; done
		[ "$#" -gt 1 ] && printf '%s\n' "$2:$e"
	done </proc/self/mountinfo | grep -E '^(9p|virtiofs|nfs|nfs4|cifs|smb3|fuse[.a-z]*|vboxsf|ceph):' | tr '\n' ' ')
	types=$(while read -r a b c d e f g rest; do
		set -- $g $rest
		while [ "$#" -gt 0 ] && [ "$1" != - ]; do shift; done
		[ "$#" -gt 1 ] && printf '%s\n' "$2"
	done </proc/self/mountinfo | sort -u | tr '\n' ' ')
	if [ -n "$hits$shares" ]; then
		report host_files escaped "readable:$hits ${shares:+shared folders: $shares}"
	else
		report host_files blocked "none of $n host paths and devices readable; no shared folder among the mounts ($types)"
	fi
}

check_dotenv() {
	find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o \( -name '.env' -o -name '.env.*' \) -print 2>/dev/null >"$TMP/envs"
	out="" inside=0
	while read -r f; do
		case "$f" in
		/workspace/*) inside=$((inside + 1)) ;;
		"$TMP"/*) ;;
		*) readable "$f" && out="$out $f" ;;
		esac
	done <"$TMP/envs"
	if [ -n "$out" ]; then
		report dotenv escaped "readable outside /workspace:$out"
	elif [ -n "${PROBE_DECOY:-}" ] && [ "$inside" -eq 0 ]; then
		report dotenv error "the search did not find even $PROBE_DECOY: it cannot be trusted"
	else
		report dotenv blocked "none readable outside /workspace (searched /; $inside found inside /workspace)"
	fi
}

check_credentials() {
	env >"$TMP/env"
	names="" real=""
	while IFS= read -r kv; do
		k=${kv%%=*} v=${kv#*=}
		case "$k" in *[!A-Za-z0-9_]* | "") continue ;; esac
		case "$k" in
		*_PROXY | *_proxy | PROBE_* | *_CA_BUNDLE | *_CA_CERTS | *_CERT_FILE | *_CERT_DIR) continue ;;
		esac
		lk=$(printf '%s' "$k" | tr 'A-Z' 'a-z')
		case "$lk" in
		*token* | *secret* | *key* | *passw* | *credential* | *auth* | *apikey* | aws_* | gh_* | github_* | gitlab_* | openai_* | anthropic_*)
			names="$names $k"
			case "$v" in
			stockade-placeholder-*) ;;
			*) real="$real $k" ;;
			esac
			;;
		esac
	done <"$TMP/env"
	files=""
	for f in "$HOME/.aws/credentials" "$HOME/.aws/config" "$HOME/.config/gcloud/credentials.db" \
		"$HOME/.config/gcloud/application_default_credentials.json" "$HOME/.azure/accessTokens.json" \
		"$HOME/.docker/config.json" "$HOME/.netrc" "$HOME/.git-credentials" "$HOME/.kube/config" \
		"$HOME/.npmrc" "$HOME/.pypirc" "$HOME/.config/gh/hosts.yml" /root/.aws/credentials /root/.netrc \
		/run/secrets /var/run/secrets/kubernetes.io /etc/stockade/secret.key; do
		[ -e "$f" ] || continue
		if readable "$f" && ! grep -q 'stockade-placeholder-' "$f" 2>/dev/null; then
			files="$files $f"
		fi
	done
	if [ -n "$real$files" ]; then
		report credentials escaped "real credentials visible: ${real:+variables$real }${files:+files$files}"
	elif [ -n "$names" ]; then
		report credentials blocked "only placeholders: variables$names; no credential files"
	else
		report credentials blocked "no credential variables or files"
	fi
}

check_system_write() {
	wrote=""
	for f in /etc/.stockade-probe /bin/.stockade-probe /usr/.stockade-probe /.stockade-probe /root/.stockade-probe; do
		if (: >"$f") 2>/dev/null; then
			wrote="$wrote $f"
			rm -f "$f"
		fi
	done
	for f in /.stockade/init /proc/sys/kernel/hostname /proc/sysrq-trigger /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max /sys/fs/cgroup/pids.max; do
		[ -e "$f" ] || continue
		if (: >>"$f") 2>/dev/null; then wrote="$wrote $f"; fi
	done
	if [ -n "$wrote" ]; then
		report system_write escaped "writable:$wrote"
	else
		report system_write blocked "/etc, /bin, /usr, /, /root, the agent binary, /proc/sys and the sandbox's own cgroup limits are not writable"
	fi
}

check_memory() {
	max=$(cat /sys/fs/cgroup/memory.max 2>/dev/null)
	case "$max" in
	"")
		report memory error "memory.max is not visible"
		return
		;;
	max)
		report memory escaped "memory.max is unlimited"
		return
		;;
	esac
	want=$((max / 1048576 + 64))
	before=$(field oom_kill /sys/fs/cgroup/memory.events)
	(dd if=/dev/zero of=/dev/null bs="${want}M" count=1) >"$TMP/dd" 2>&1
	rc=$?
	after=$(field oom_kill /sys/fs/cgroup/memory.events)
	peak=$(cat /sys/fs/cgroup/memory.peak 2>/dev/null)
	d="memory.max $((max / 1048576)) MiB; tried to fill ${want} MiB: exit $rc, oom kills $before -> $after${peak:+, peak $((peak / 1048576)) MiB}"
	if [ "$rc" -eq 0 ]; then
		report memory escaped "$d"
	elif [ "$rc" -eq 137 ] || [ "${after:-0}" -gt "${before:-0}" ]; then
		report memory blocked "$d"
	else
		report memory error "$d: $(first <"$TMP/dd")"
	fi
}

# uptime_cs: /proc/uptime in hundredths of a second.
uptime_cs() {
	read -r up rest </proc/uptime
	echo $((${up%.*} * 100 + 1${up#*.} - 100))
}

check_cpu() {
	set -- $(cat /sys/fs/cgroup/cpu.max 2>/dev/null)
	quota=${1:-} period=${2:-100000}
	if [ -z "$quota" ]; then
		report cpu error "cpu.max is not visible"
		return
	fi
	if [ "$quota" = max ]; then
		report cpu escaped "cpu.max is unlimited"
		return
	fi
	limit=$((quota * 1000 / period)) # thousandths of a CPU
	spinners=$((limit / 1000 + 2))
	u0=$(field usage_usec /sys/fs/cgroup/cpu.stat)
	t0=$(uptime_cs)
	pids=""
	i=0
	while [ "$i" -lt "$spinners" ]; do
		(while :; do :; done) &
		pids="$pids $!"
		i=$((i + 1))
	done
	sleep 3
	kill $pids 2>/dev/null
	wait 2>/dev/null
	u1=$(field usage_usec /sys/fs/cgroup/cpu.stat)
	t1=$(uptime_cs)
	wall=$(((t1 - t0) * 10)) # ms
	[ "$wall" -gt 0 ] || wall=1
	used=$(((u1 - u0) / wall)) # thousandths of a CPU
	cpus=$(grep -c '^processor' /proc/cpuinfo 2>/dev/null)
	d="cpu.max $quota/$period ($limit/1000 CPU); $spinners busy loops for ${wall} ms used $used/1000 CPU"
	if [ -n "$cpus" ] && [ "$limit" -ge $((cpus * 1000)) ]; then
		d="$d (the limit equals the VM's $cpus CPUs: the VM bounds it as well)"
	fi
	if [ "$used" -gt $((limit * 115 / 100 + 50)) ]; then
		report cpu escaped "$d"
	else
		report cpu blocked "$d"
	fi
}

log "stockade probe: uid $(id -u), host $(hostname 2>/dev/null), kernel $(uname -r), proxy ${PROXY:-none}"
check_user
check_ssh_keys
check_host_files
check_dotenv
check_credentials
check_system_write
[ -n "${PROBE_INTERNET:-}" ] && via_proxy internet_proxy "$PROBE_INTERNET"
[ -n "${PROBE_INTERNET_DIRECT:-}" ] && direct internet_direct "$PROBE_INTERNET_DIRECT"
[ -n "${PROBE_METADATA:-}" ] && via_proxy metadata_proxy "$PROBE_METADATA"
[ -n "${PROBE_METADATA:-}" ] && direct metadata_direct "$PROBE_METADATA"
# shellcheck disable=SC2086 # lists of targets
[ -n "${PROBE_PRIVATE:-}" ] && via_proxy private_proxy $PROBE_PRIVATE
# shellcheck disable=SC2086
[ -n "${PROBE_PRIVATE:-}" ] && direct private_direct $PROBE_PRIVATE
[ -n "${PROBE_CONTROL:-}" ] && via_proxy control_plane_proxy "$PROBE_CONTROL"
[ -n "${PROBE_CONTROL:-}" ] && direct control_plane_direct "$PROBE_CONTROL"
check_cpu
check_memory
log "stockade probe: done"
