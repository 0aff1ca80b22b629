/* Request-response round trips over UDP: the benchmark's latency client.
 *
 *   rr DST_IP PORT SESSIONS DURATION_MS WARMUP_MS PAYLOAD
 *
 * Opens SESSIONS connected UDP sockets (one flow each), keeps exactly one
 * request in flight per session, and prints one JSON object with the
 * round-trip times measured after WARMUP_MS: count, avg, p50, p99, std, max
 * (microseconds), plus lost requests. A request unanswered for 100 ms counts
 * as lost and is sent again. Compiled by the benchmark at run time with the
 * host's clang, so it needs no package of its own. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SESSIONS 1024
#define MAX_SAMPLES (8 * 1024 * 1024)
#define LOSS_NS (100 * 1000 * 1000ULL)

struct session {
	int fd;
	uint64_t seq;
	uint64_t sent_ns;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int send_request(struct session *s, char *buf, size_t len)
{
	s->seq++;
	memcpy(buf, &s->seq, sizeof(s->seq));
	s->sent_ns = now_ns();
	return send(s->fd, buf, len, 0) < 0 && errno != ENOBUFS ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct session sessions[MAX_SESSIONS];
	struct epoll_event events[64];
	struct sockaddr_in dst = { .sin_family = AF_INET };
	uint64_t *samples, count = 0, lost = 0, start, measure_from, end;
	char buf[2048] = { 0 };
	int nsessions, port, epfd;
	size_t payload;

	if (argc != 7) {
		fprintf(stderr, "usage: %s DST_IP PORT SESSIONS DURATION_MS WARMUP_MS PAYLOAD\n", argv[0]);
		return 2;
	}
	if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
		fprintf(stderr, "rr: bad address %s\n", argv[1]);
		return 2;
	}
	port = atoi(argv[2]);
	nsessions = atoi(argv[3]);
	payload = (size_t)atoi(argv[6]);
	if (nsessions < 1 || nsessions > MAX_SESSIONS || payload < 8 || payload > sizeof(buf)) {
		fprintf(stderr, "rr: sessions must be 1..%d, payload 8..%zu\n", MAX_SESSIONS, sizeof(buf));
		return 2;
	}
	samples = malloc(sizeof(*samples) * MAX_SAMPLES);
	epfd = epoll_create1(0);
	if (!samples || epfd < 0) {
		perror("rr");
		return 1;
	}
	dst.sin_port = htons(port);
	for (int i = 0; i < nsessions; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };

		sessions[i].fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		sessions[i].seq = 0;
		if (sessions[i].fd < 0 || connect(sessions[i].fd, (void *)&dst, sizeof(dst)) < 0 ||
		    epoll_ctl(epfd, EPOLL_CTL_ADD, sessions[i].fd, &ev) < 0) {
			perror("rr: socket");
			return 1;
		}
	}
	start = now_ns();
	measure_from = start + (uint64_t)atoi(argv[5]) * 1000000ULL;
	end = measure_from + (uint64_t)atoi(argv[4]) * 1000000ULL;
	for (int i = 0; i < nsessions; i++)
		if (send_request(&sessions[i], buf, payload) < 0) {
			perror("rr: send");
			return 1;
		}
	for (;;) {
		uint64_t now = now_ns();
		int ready;

		if (now >= end)
			break;
		ready = epoll_wait(epfd, events, 64, 10);
		for (int e = 0; e < ready; e++) {
			struct session *s = &sessions[events[e].data.u32];
			char reply[2048];
			uint64_t seq;
			ssize_t got;

			/* One reply per session per wake-up: on veth the reply
			 * is often queued before send() returns, and draining
			 * one session would starve every other. */
			got = recv(s->fd, reply, sizeof(reply), 0);
			if (got < (ssize_t)sizeof(seq))
				continue;
			memcpy(&seq, reply, sizeof(seq));
			if (seq != s->seq)
				continue; /* a late reply to a request already counted lost */
			now = now_ns();
			if (s->sent_ns >= measure_from && count < MAX_SAMPLES)
				samples[count++] = now - s->sent_ns;
			if (send_request(s, buf, payload) < 0) {
				perror("rr: send");
				return 1;
			}
		}
		now = now_ns();
		for (int i = 0; i < nsessions; i++)
			if (now - sessions[i].sent_ns > LOSS_NS) {
				if (sessions[i].sent_ns >= measure_from)
					lost++;
				send_request(&sessions[i], buf, payload);
			}
	}
	if (!count) {
		printf("{\"count\": 0, \"lost\": %llu}\n", (unsigned long long)lost);
		return 0;
	}
	qsort(samples, count, sizeof(*samples), cmp_u64);
	{
		double sum = 0, sq = 0, avg;

		for (uint64_t i = 0; i < count; i++)
			sum += samples[i];
		avg = sum / count;
		for (uint64_t i = 0; i < count; i++)
			sq += (samples[i] - avg) * (samples[i] - avg);
		printf("{\"count\": %llu, \"lost\": %llu, \"avg_us\": %.3f, \"p50_us\": %.3f, \"p99_us\": %.3f, "
		       "\"std_us\": %.3f, \"max_us\": %.3f, \"min_us\": %.3f}\n",
		       (unsigned long long)count, (unsigned long long)lost, avg / 1e3,
		       samples[(count - 1) / 2] / 1e3, samples[(uint64_t)((count - 1) * 0.99)] / 1e3,
		       sqrt(sq / count) / 1e3, samples[count - 1] / 1e3, samples[0] / 1e3);
	}
	return 0;
}
