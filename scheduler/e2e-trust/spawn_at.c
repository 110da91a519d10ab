// SPDX-License-Identifier: GPL-2.0-only
/*
 * spawn_at PID USER [CGROUP_DIR] -- COMMAND [ARGS...]
 *
 * The trust tests' way to give a process an exact pid, deterministically (no racing pid_max): as
 * root, clone3() with set_tid = { PID } creates a child whose pid is PID (the call fails with EEXIST
 * if PID is taken). The child moves itself into CGROUP_DIR (its cgroup.procs) if one is given, takes
 * USER's uid, gid and supplementary groups, and execs COMMAND. The parent waits for it and exits with
 * its status (128 + signal if it was killed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: spawn_at PID USER [CGROUP_DIR] -- COMMAND [ARGS...]\n");
		return 2;
	}
	pid_t want = (pid_t)strtol(argv[1], NULL, 10);
	struct passwd *pw = getpwnam(argv[2]);
	if (!pw) {
		fprintf(stderr, "spawn_at: no user %s\n", argv[2]);
		return 2;
	}
	int cmd = 3;
	const char *cgroup = NULL;
	if (strcmp(argv[3], "--") != 0) {
		cgroup = argv[3];
		cmd = 4;
	}
	if (cmd >= argc || strcmp(argv[cmd], "--") != 0 || cmd + 1 >= argc) {
		fprintf(stderr, "spawn_at: expected -- COMMAND\n");
		return 2;
	}
	cmd++;

	struct clone_args args;
	memset(&args, 0, sizeof(args));
	args.exit_signal = SIGCHLD;
	args.set_tid = (uint64_t)(uintptr_t)&want;
	args.set_tid_size = 1;
	long pid = syscall(SYS_clone3, &args, sizeof(args));
	if (pid < 0) {
		fprintf(stderr, "spawn_at: clone3 with set_tid %d: %s\n", want, strerror(errno));
		return 3;
	}
	if (pid == 0) {
		if (cgroup) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup);
			int fd = open(path, O_WRONLY | O_CLOEXEC);
			if (fd < 0 || write(fd, "0\n", 2) != 2) {
				fprintf(stderr, "spawn_at: cannot join %s: %s\n", path, strerror(errno));
				_exit(4);
			}
			close(fd);
		}
		if (initgroups(pw->pw_name, pw->pw_gid) || setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) ||
		    setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid)) {
			fprintf(stderr, "spawn_at: cannot become %s: %s\n", pw->pw_name, strerror(errno));
			_exit(4);
		}
		execvp(argv[cmd], &argv[cmd]);
		fprintf(stderr, "spawn_at: exec %s: %s\n", argv[cmd], strerror(errno));
		_exit(127);
	}
	int status;
	while (waitpid((pid_t)pid, &status, 0) < 0) {
		if (errno != EINTR)
			return 3;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
