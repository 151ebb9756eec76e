/*
 * stockade stub init: PID 1 of an idle sandbox (see stubinit.go).
 *
 * The Go sandbox init (stockade-agent sandbox-init) execs this program in
 * place when the sandbox has been idle for a while: no child process, no
 * open connection but the agent's "hello" ones. It then holds:
 *   - the init socket's listener (inherited),
 *   - the agent's hello connections (inherited; held open so the agent
 *     reads EOF only when PID 1 dies),
 * reaps any child the kernel hands it, ignores every signal it can, and on
 * the first connection accepted execs the Go init again, in place (same
 * PID 1, namespaces, cgroup, credentials, seccomp filter), handing it the
 * listener, the hello connections and the accepted connection, whose first
 * message it never reads.
 *
 * usage: stub INIT LISTEN_FD IDLE_MS OUTSIDE_ONLY [HOLD_FD...]
 *   argv[0] is the stub's own path in the sandbox, INIT the Go init's;
 *   IDLE_MS and OUTSIDE_ONLY (0 or 1) are passed back to it.
 *
 * It allocates nothing, parses nothing a sandbox sends, and runs one thread:
 * its memory is a few pages of its own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#define MAX_HOLD 16
#define ARG_LEN 24

extern char **environ;

static void nothing(int sig) { (void)sig; }

static int parse_fd(const char *s)
{
	char *end;
	long v;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *s == '\0' || *end != '\0' || v < 0 || v > 1 << 20)
		return -1;
	return (int)v;
}

static void die(const char *what)
{
	/* stderr is the sandbox's init.log: the agent shows its tail. */
	fprintf(stderr, "stockade stub init: %s: %s\n", what, strerror(errno));
	_exit(1);
}

/* peer_outside: the peer has no PID in our PID namespace (the agent). */
static int peer_outside(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return 0;
	return cred.pid == 0;
}

static void keep_across_exec(int fd)
{
	int fl = fcntl(fd, F_GETFD);
	if (fl < 0 || fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) != 0)
		die("keep a descriptor across exec");
}

static void reap(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(int argc, char **argv)
{
	int ln, outside_only, nhold = 0, i;
	int hold[MAX_HOLD];
	sigset_t all, none;
	struct sigaction sa;

	/* First: /proc/1 stays root's, out of reach of the sandbox user. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		die("set not dumpable");
	if (argc < 5 || argc - 5 > MAX_HOLD) {
		fprintf(stderr, "usage: stub INIT LISTEN_FD IDLE_MS OUTSIDE_ONLY [HOLD_FD...] (at most %d)\n", MAX_HOLD);
		return 2;
	}
	ln = parse_fd(argv[2]);
	if (ln < 0 || parse_fd(argv[3]) < 0 || (strcmp(argv[4], "0") != 0 && strcmp(argv[4], "1") != 0)) {
		fprintf(stderr, "stockade stub init: bad arguments\n");
		return 2;
	}
	outside_only = argv[4][0] == '1';
	for (i = 5; i < argc; i++) {
		hold[nhold] = parse_fd(argv[i]);
		if (hold[nhold] < 0) {
			fprintf(stderr, "stockade stub init: bad hold descriptor %s\n", argv[i]);
			return 2;
		}
		nhold++;
	}

	/*
	 * Every signal that can be caught is, by a handler that does nothing:
	 * an uncaught one would end PID 1 (and the sandbox). Handlers, not
	 * SIG_IGN: exec resets handlers to the default, so the Go init starts
	 * as it would from crun. SIGCHLD stays blocked but in ppoll.
	 */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = nothing;
	sigfillset(&sa.sa_mask);
	for (i = 1; i < NSIG; i++) {
		if (i == SIGKILL || i == SIGSTOP)
			continue;
		sigaction(i, &sa, NULL); /* fails for the libc-reserved ones */
	}
	sigfillset(&all);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &all, NULL);

	for (;;) {
		struct pollfd pfd[1 + MAX_HOLD];
		int n = 0, conn;

		reap();
		pfd[n].fd = ln;
		pfd[n].events = POLLIN;
		n++;
		for (i = 0; i < nhold; i++) {
			pfd[n].fd = hold[i];
			pfd[n].events = POLLIN;
			n++;
		}
		if (ppoll(pfd, n, NULL, &none) < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		/* A hello connection readable: a message (dropped) or its end. */
		for (i = nhold - 1; i >= 0; i--) {
			char buf[256];
			ssize_t r;
			if (!(pfd[1 + i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = recv(hold[i], buf, sizeof(buf), MSG_DONTWAIT);
			if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)))
				continue;
			close(hold[i]);
			hold[i] = hold[--nhold];
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		conn = accept4(ln, NULL, NULL, SOCK_CLOEXEC);
		if (conn < 0) {
			if (errno == EBADF || errno == EINVAL || errno == ENOTSOCK)
				die("accept");
			continue; /* the peer went, or a passing shortage */
		}
		if (outside_only && !peer_outside(conn)) {
			close(conn);
			continue;
		}
		{
			/* INIT sandbox-init --listen-fd L --idle-ms N --stub S
			   [--outside-only] --conn-fd C [--hold-fd H]... */
			char *nargv[12 + 2 * MAX_HOLD];
			char nums[2 + MAX_HOLD][ARG_LEN];
			int k = 0;

			nargv[k++] = argv[1];
			nargv[k++] = "sandbox-init";
			nargv[k++] = "--listen-fd";
			nargv[k++] = argv[2];
			nargv[k++] = "--idle-ms";
			nargv[k++] = argv[3];
			nargv[k++] = "--stub";
			nargv[k++] = argv[0];
			if (outside_only)
				nargv[k++] = "--outside-only";
			snprintf(nums[0], ARG_LEN, "%d", conn);
			nargv[k++] = "--conn-fd";
			nargv[k++] = nums[0];
			for (i = 0; i < nhold; i++) {
				snprintf(nums[1 + i], ARG_LEN, "%d", hold[i]);
				nargv[k++] = "--hold-fd";
				nargv[k++] = nums[1 + i];
			}
			nargv[k] = NULL;
			keep_across_exec(ln);
			keep_across_exec(conn);
			for (i = 0; i < nhold; i++)
				keep_across_exec(hold[i]);
			reap();
			/* As crun starts it: the Go init turns randomization back on
			   before any command of the sandbox runs (personality.go). */
			personality(personality(0xffffffff) | ADDR_NO_RANDOMIZE);
			sigprocmask(SIG_SETMASK, &none, NULL);
			execve(argv[1], nargv, environ);
			die("exec the sandbox init");
		}
	}
}
