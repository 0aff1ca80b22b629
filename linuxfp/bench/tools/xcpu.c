/* Cache-line ping-pong between two CPUs: how expensive it currently is to
 * hand data from one CPU to the other.
 *
 *   xcpu CPU_A CPU_B ROUND_TRIPS
 *
 * Prints one JSON object: {"ns_per_round_trip": ...}. The benchmark runs it
 * between measurements: on a virtual machine the host may move the two
 * vCPUs closer or further apart (same core complex or not), which changes
 * the cost of every frame handed from the generator's CPU to the DUT's
 * without changing either CPU's own speed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) _Atomic uint64_t ball;
static uint64_t round_trips;

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
		fprintf(stderr, "xcpu: cannot run on CPU %d\n", cpu);
		exit(1);
	}
}

static void *partner(void *arg)
{
	pin(*(int *)arg);
	for (uint64_t i = 0; i < round_trips; i++) {
		while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 1)
			;
		atomic_store_explicit(&ball, 2 * i + 2, memory_order_release);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct timespec t0, t1;
	pthread_t thread;
	int cpu_a, cpu_b;

	if (argc != 4) {
		fprintf(stderr, "usage: %s CPU_A CPU_B ROUND_TRIPS\n", argv[0]);
		return 2;
	}
	cpu_a = atoi(argv[1]);
	cpu_b = atoi(argv[2]);
	round_trips = strtoull(argv[3], NULL, 10);
	pin(cpu_a);
	if (pthread_create(&thread, NULL, partner, &cpu_b) != 0)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t i = 0; i < round_trips; i++) {
		atomic_store_explicit(&ball, 2 * i + 1, memory_order_release);
		while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 2)
			;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_join(thread, NULL);
	printf("{\"ns_per_round_trip\": %.1f}\n",
	       ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)round_trips);
	return 0;
}
