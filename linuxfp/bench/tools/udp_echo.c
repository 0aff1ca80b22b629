/* UDP echo server: the flannel benchmark's pods answer each datagram with
 * itself, back to its sender, so a round trip measures the network path
 * rather than an interpreter.
 *
 *   udp_echo PORT
 *
 * One socket on 0.0.0.0:PORT, one datagram at a time; runs until killed.
 * Compiled by the benchmark at run time with the host's clang. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	struct sockaddr_in peer;
	socklen_t peer_len;
	char buf[2048];
	ssize_t n;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: %s PORT\n", argv[0]);
		return 2;
	}
	addr.sin_port = htons((unsigned short)atoi(argv[1]));
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		perror("udp_echo");
		return 1;
	}
	/* readiness for whoever started us: the port is bound */
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		peer_len = sizeof(peer);
		n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&peer, &peer_len);
		if (n >= 0)
			sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&peer, peer_len);
	}
}
