/* Cost of system calls, for `linuxfp bench watch`: prints the mean ns per
 * call of KIND over N calls (CLOCK_MONOTONIC around the whole loop).
 *   getppid     a call no watch program runs for
 *   setsockopt  SO_PRIORITY on a UDP socket: the watch's cgroup setsockopt
 *               program runs and lets it pass (not an x_tables option)
 *   sysctl-read   pread of /proc/sys/net/ipv4/conf/lo/accept_local: the
 *                 sysctl watch runs and returns at once (not a write)
 *   sysctl-write  pwrite of that sysctl's own value back: the sysctl watch
 *                 counts it (the controller then re-reads the sysctls)
 *   send        one byte over an AF_UNIX datagram socket pair, received
 *               back: the filter node's raw tracepoint on every sendmsg
 *               (sock_send_length) runs and returns (not netfilter) */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 1000000;
	double start;

	if (argc < 2 || n <= 0) {
		fprintf(stderr, "usage: %s getppid|setsockopt|sysctl-read|sysctl-write|send [N]\n", argv[0]);
		return 2;
	}
	if (strcmp(argv[1], "getppid") == 0) {
		start = now_ns();
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
	} else if (strcmp(argv[1], "setsockopt") == 0) {
		int sock = socket(AF_INET, SOCK_DGRAM, 0);
		int priority = 1;

		if (sock < 0) {
			perror("socket");
			return 1;
		}
		start = now_ns();
		for (long i = 0; i < n; i++) {
			if (setsockopt(sock, SOL_SOCKET, SO_PRIORITY, &priority, sizeof(priority)) != 0) {
				perror("setsockopt");
				return 1;
			}
		}
	} else if (strncmp(argv[1], "sysctl-", 7) == 0) {
		int write_back = strcmp(argv[1], "sysctl-write") == 0;
		int fd = open("/proc/sys/net/ipv4/conf/lo/accept_local", write_back ? O_RDWR : O_RDONLY);
		char value[16];
		ssize_t len;

		if (fd < 0 || (len = pread(fd, value, sizeof(value), 0)) <= 0) {
			perror("/proc/sys/net/ipv4/conf/lo/accept_local");
			return 1;
		}
		start = now_ns();
		for (long i = 0; i < n; i++) {
			if ((write_back ? pwrite(fd, value, len, 0) : pread(fd, value, sizeof(value), 0)) <= 0) {
				perror(argv[1]);
				return 1;
			}
		}
	} else if (strcmp(argv[1], "send") == 0) {
		int pair[2];
		char byte = 'x';

		if (socketpair(AF_UNIX, SOCK_DGRAM, 0, pair) != 0) {
			perror("socketpair");
			return 1;
		}
		start = now_ns();
		for (long i = 0; i < n; i++) {
			if (send(pair[0], &byte, 1, 0) != 1 || recv(pair[1], &byte, 1, 0) != 1) {
				perror("send");
				return 1;
			}
		}
	} else {
		fprintf(stderr, "unknown kind %s\n", argv[1]);
		return 2;
	}
	printf("%.2f\n", (now_ns() - start) / n);
	return 0;
}
