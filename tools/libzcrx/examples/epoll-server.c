// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
/*
 * An epoll server that receives many TCP connections zero-copy with
 * libzcrx: one context bound to one rx queue serves every connection.
 *
 *   cc epoll-server.c $(pkg-config --cflags --libs zcrx) -o epoll-server
 *   ./epoll-server -i eth0 -q 3 -p 5201 [-a AREA_MIB] [-b BUF_SIZE] [-m MAX_CONNS] [-n CONNECTIONS]
 *   ./epoll-server -p 5201            (no queue: a copy-only context, any NIC)
 *
 * -b: bytes per buffer (4096, 32768, 32k, 2M; default a page). Buffers
 * larger than a page need huge pages for zero-copy (the library maps the
 * area with MAP_HUGETLB): reserve them with /proc/sys/vm/nr_hugepages.
 *
 * Sizing (Documentation/zcrx-rs.rst, "Sizing the area"): half the area is
 * for what the sockets may queue, the rest for what the program holds and
 * what is on its way. Each connection's receive buffer (SO_RCVBUF, set on
 * the listener and inherited) is its share of that half, for at most -m
 * connections at once (default: one per 4 MiB of the area); a connection
 * beyond them is closed at once. So a few peers that send in bulk, or
 * park out-of-order data, cannot hold the whole area and stall the rest.
 *
 * For each connection it prints, at its end, the bytes received, how many
 * came zero-copy and how many were copied, and an FNV-1a 64-bit hash of
 * the payload (so a test can check it byte for byte). With -n it exits
 * after that many connections, printing the totals.
 *
 * Events (a module with ZCRX_FEATURE_EVENTS): the context's fd is in the
 * epoll set too, for EPOLLPRI. It arms ZCRX_EVENT_ALLOC_FAIL, and says on
 * stderr when the refill ring ran dry (the NIC drops until buffers come
 * back), at most once a second: it arms the event again a second after it
 * fired, so a storm of failures costs one wake-up. With a queue bound it
 * also arms ZCRX_EVENT_COPY once, to say that data arrived by copy (flow
 * not steered to the queue, or header split off).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zcrx.h>

#define NR_RECS 256

/* ZCRX_RECV_MERGE when the module has it: fewer records per byte */
static unsigned int recv_merge;
#define REARM_MS 1000	/* ZCRX_EVENT_ALLOC_FAIL: at most one line a second */

struct conn {
	int fd;
	char peer[64];
	uint64_t bytes, zc, copied, hash;
	struct conn *next_starved;	/* on the starved list (see below) */
	int starved;
};

/*
 * -ENOBUFS: every buffer of the area is out and this program holds some
 * (the library's returns that wait for ring room count too). The socket
 * stays readable, so under level-triggered EPOLLIN it would wake us again
 * at once: a busy loop until buffers come back. Such a socket leaves the
 * epoll set's EPOLLIN for a moment instead (STARVED_MS); the main loop
 * puts it back, and it is read again.
 */
#define STARVED_MS 1
static struct conn *starved;

static void die(const char *what, int err)
{
	fprintf(stderr, "epoll-server: %s: %s\n", what, strerror(err));
	exit(1);
}

/* A whole number from @lo to @hi for option -@opt, or exit 2 saying why. */
static long num_arg(int opt, const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "epoll-server: -%c %s: want a number from %ld to %ld\n", opt, s, lo, hi);
		exit(2);
	}
	return v;
}

/* Listens on @port with receive buffers of @rcvbuf bytes; *@got is what the
 * kernel granted (net.core.rmem_max caps it), as it reports it.
 */
static int listen_on(int port, int rcvbuf, int *got)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
	socklen_t glen = sizeof(*got);
	int one = 1, fd;

	fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket", errno);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* before listen(): accepted sockets inherit it, the window scale too */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) ||
	    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, got, &glen))
		die("SO_RCVBUF", errno);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 128))
		die("bind/listen", errno);
	return fd;
}

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* What the example keeps of the context's events. */
struct events {
	int on;			/* the module has them (ZCRX_FEATURE_EVENTS) */
	int queue;		/* the bound queue (-1: copy-only) */
	int64_t rearm_at;	/* when to arm ZCRX_EVENT_ALLOC_FAIL again (0: armed) */
};

/* Arms @arm and says on stderr what fired since the last call. */
static void on_events(struct zcrx *z, struct events *e, uint32_t arm)
{
	struct zcrx_ring_stats rs;
	uint32_t fired;
	int ret = zcrx_events(z, arm, &fired, NULL);

	if (ret) {
		fprintf(stderr, "epoll-server: zcrx_events: %s (no more events)\n", strerror(-ret));
		e->on = 0;
		return;
	}
	if (fired & ZCRX_EVENT_ALLOC_FAIL) {
		/* the counters in the ring mapping: no system call */
		if (zcrx_ring_stats(z, &rs))
			rs.alloc_fail = 0;
		fprintf(stderr, "epoll-server: zcrx: the refill ring ran dry (failed allocations "
			"so far: %" PRIu64 "), the NIC drops until buffers come back: "
			"returning them sooner or a larger area (-a) helps\n", rs.alloc_fail);
		/* again in a while: one wake-up per storm */
		e->rearm_at = now_ms() + REARM_MS;
	}
	if (fired & ZCRX_EVENT_COPY)	/* armed once: one line */
		fprintf(stderr, "epoll-server: zcrx: data was copied, not placed by the NIC: "
			"steer the flows to queue %d (ethtool -N) with header split on\n", e->queue);
}

/* "32768", "32k", "2M": bytes; 0 if it is not a number (or too large). */
static uint32_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return 0;
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	return *end || v > UINT32_MAX ? 0 : (uint32_t)v;
}

/* Reads what is there; returns 1 at the end of the stream, 0 if more may
 * come, 2 if no buffer is free to read into (-ENOBUFS), a negative errno if
 * the connection failed. */
static int drain(struct zcrx *z, struct conn *c)
{
	struct zcrx_rec recs[NR_RECS];

	for (;;) {
		unsigned int nr = NR_RECS, i;
		ssize_t n = zcrx_recv(z, c->fd, recs, &nr, ZCRX_RECV_DONTWAIT | recv_merge);

		if (n == -EAGAIN)
			return 0;	/* level-triggered: we come back */
		if (n == -ENOBUFS)
			return 2;
		if (n < 0)
			return (int)n;
		if (n == 0)
			return 1;
		for (i = 0; i < nr; i++) {
			const unsigned char *p = zcrx_data(z, &recs[i]);
			uint32_t k;

			if (!p)
				die("zcrx_data: a record outside the area", EFAULT);
			for (k = 0; k < recs[i].len; k++)
				c->hash = (c->hash ^ p[k]) * 0x100000001b3ULL;
			if (recs[i].flags & ZCRX_REC_COPY)
				c->copied += recs[i].len;
			else
				c->zc += recs[i].len;
		}
		c->bytes += (uint64_t)n;
		/* one call gives the whole batch back */
		if (zcrx_return(z, recs, nr))
			die("zcrx_return", ENOMEM);
	}
}

int main(int argc, char **argv)
{
	const char *ifname = NULL;
	int queue = -1, port = 5201, opt, lfd, ep, ret;
	long area_mib = 16, want = 0, done = 0, max_conns = 0, open_conns = 0, refused = 0;
	long long budget;
	int rcvbuf, granted;
	uint32_t buf_size = 0;
	uint64_t tb = 0, tz = 0, tc = 0;
	static char ctx_tag;	/* epoll data of the context's fd */
	struct events evt = { .on = 0 };
	struct zcrx_info info;
	struct epoll_event ev;
	struct zcrx *z;

	while ((opt = getopt(argc, argv, "i:q:p:a:b:m:n:")) != -1) {
		switch (opt) {
		case 'i': ifname = optarg; break;
		case 'q': queue = (int)num_arg(opt, optarg, 0, 65535); break;
		case 'p': port = (int)num_arg(opt, optarg, 1, 65535); break;
		case 'a': area_mib = num_arg(opt, optarg, 1, 1L << 20); break;
		case 'b':
			buf_size = parse_size(optarg);
			if (!buf_size) {
				fprintf(stderr, "epoll-server: -b %s: bytes, e.g. 32768 or 32k\n", optarg);
				return 2;
			}
			break;
		case 'm': max_conns = num_arg(opt, optarg, 1, 1L << 20); break;
		case 'n': want = num_arg(opt, optarg, 0, LONG_MAX); break;
		default:
			fprintf(stderr, "usage: %s [-i IFNAME -q QUEUE] [-p PORT] [-a AREA_MIB] [-b BUF_SIZE] [-m MAX_CONNS] [-n CONNECTIONS]\n"
				"without -i and -q: a copy-only context (every byte copied, any NIC)\n"
				"-b: bytes per buffer (32768, 32k; default a page)\n"
				"-m: connections served at once (default: one per 4 MiB of the area)\n",
				argv[0]);
			return 2;
		}
	}
	if (!max_conns)
		max_conns = area_mib / 4 > 0 ? area_mib / 4 : 1;
	/* a quarter of the area over the connections: half of it queued, as
	 * the kernel doubles SO_RCVBUF (64 KiB at least: a smaller window
	 * crawls; INT_MAX at most, what the option takes) */
	budget = ((long long)area_mib << 20) / 4 / max_conns;
	rcvbuf = budget > INT_MAX ? INT_MAX : budget < (64 << 10) ? 64 << 10 : (int)budget;
	if (budget < (64 << 10))
		fprintf(stderr, "epoll-server: -m %ld connections on a %ld MiB area leave each less "
			"than 64 KiB: they may hold more than the area together (fewer -m or a larger -a)\n",
			max_conns, area_mib);
	if (!ifname != (queue < 0)) {
		fprintf(stderr, "epoll-server: -i IFNAME and -q QUEUE go together\n");
		return 2;
	}
	ret = zcrx_open(&z, NULL);
	if (ret == -ENOENT)
		die("zcrx_open /dev/zcrx (is the zcrx_rs module loaded?)", -ret);
	if (ret)
		die("zcrx_open /dev/zcrx", -ret);
	ret = zcrx_register_area_buf(z, (size_t)area_mib << 20, buf_size);
	if (ret == -EINVAL && buf_size)
		die("zcrx_register_area_buf (-b: a power of two from the page size to 2M, "
		    "the area a multiple of it; module without large buffers?)", -ret);
	if (ret)
		die("zcrx_register_area_buf", -ret);
	if (ifname) {
		ret = zcrx_bind(z, ifname, queue, 0);
		if (ret == -ERANGE && zcrx_buf_size(z) > (uint32_t)sysconf(_SC_PAGESIZE)) {
			fprintf(stderr, "epoll-server: buffers of %u bytes need physically contiguous "
				"memory: reserve huge pages (echo N > /proc/sys/vm/nr_hugepages), "
				"or check that queue %d exists\n", zcrx_buf_size(z), queue);
		}
		if (ret)
			die("zcrx_bind", -ret);
	} else {
		ret = zcrx_bind_nodev(z, 0);
		if (ret)
			die("zcrx_bind_nodev (module without copy-only contexts?)", -ret);
	}

	lfd = listen_on(port, rcvbuf, &granted);
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = NULL };
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	/* Events: the context's fd says EPOLLPRI when an armed one fired. */
	evt.queue = queue;
	if (!zcrx_info(z, &info) && info.features & ZCRX_FEATURE_MERGE)
		recv_merge = ZCRX_RECV_MERGE;
	if (!zcrx_info(z, &info) && info.features & ZCRX_FEATURE_EVENTS) {
		ev = (struct epoll_event){ .events = EPOLLPRI, .data.ptr = &ctx_tag };
		evt.on = !epoll_ctl(ep, EPOLL_CTL_ADD, zcrx_fd(z), &ev);
		if (!evt.on)
			fprintf(stderr, "epoll-server: epoll_ctl: the context's fd: %s (no events)\n",
				strerror(errno));
		/* copies are the rule without a queue: hear of them when bound */
		if (evt.on)
			on_events(z, &evt, ZCRX_EVENT_ALLOC_FAIL | (ifname ? ZCRX_EVENT_COPY : 0));
		if (!evt.on)
			epoll_ctl(ep, EPOLL_CTL_DEL, zcrx_fd(z), NULL);
	}
	if (ifname)
		printf("listening on port %d, zero-copy from %s queue %d, %u-byte buffers",
		       port, ifname, queue, zcrx_buf_size(z));
	else
		printf("listening on port %d, copy-only (no queue bound), %u-byte buffers",
		       port, zcrx_buf_size(z));
	/* what the kernel granted (doubled, capped by net.core.rmem_max) */
	printf("; at most %ld connections, receive buffer %d KiB each (asked for %d)\n",
	       max_conns, granted >> 10, rcvbuf >> 10);
	fflush(stdout);

	while (!want || done < want) {
		struct epoll_event evs[64];
		int64_t wait_ms = evt.on && evt.rearm_at ? evt.rearm_at - now_ms() : -1;
		int n, i;

		if (starved && (wait_ms < 0 || wait_ms > STARVED_MS))
			wait_ms = STARVED_MS;

		if (evt.on && evt.rearm_at && wait_ms <= 0) {
			evt.rearm_at = 0;
			on_events(z, &evt, ZCRX_EVENT_ALLOC_FAIL);
			if (!evt.on)
				epoll_ctl(ep, EPOLL_CTL_DEL, zcrx_fd(z), NULL);
			continue;
		}
		n = epoll_wait(ep, evs, 64, (int)wait_ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait", errno);
		/* The starved sockets' moment is over: readable ones wake us. */
		while (starved) {
			struct conn *c = starved;

			starved = c->next_starved;
			c->starved = 0;
			ev = (struct epoll_event){ .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
		}
		for (i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (evs[i].data.ptr == &ctx_tag) {	/* events fired: collect */
				on_events(z, &evt, 0);
				if (!evt.on)
					epoll_ctl(ep, EPOLL_CTL_DEL, zcrx_fd(z), NULL);
				continue;
			}
			if (!c) {	/* the listener */
				struct sockaddr_in6 a;
				socklen_t alen = sizeof(a);
				int fd = accept4(lfd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
				char host[INET6_ADDRSTRLEN];

				if (fd < 0)
					continue;
				if (open_conns >= max_conns) {
					/* over the budget: its peer sees the close */
					close(fd);
					if (!refused++)
						fprintf(stderr, "epoll-server: more than %ld connections "
							"at once: closing the extra ones (-m)\n", max_conns);
					continue;
				}
				open_conns++;
				c = calloc(1, sizeof(*c));
				if (!c)
					die("calloc", ENOMEM);
				c->fd = fd;
				c->hash = 0xcbf29ce484222325ULL;
				inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof(host));
				snprintf(c->peer, sizeof(c->peer), "[%s]:%u", host, ntohs(a.sin6_port));
				ev = (struct epoll_event){ .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				continue;
			}
			ret = drain(z, c);
			if (ret == 2 && !c->starved) {
				ev = (struct epoll_event){ .events = 0, .data.ptr = c };
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				c->starved = 1;
				c->next_starved = starved;
				starved = c;
			}
			if (!ret || ret == 2)
				continue;
			if (ret < 0)
				printf("conn %s: error after %" PRIu64 " bytes: %s\n",
				       c->peer, c->bytes, strerror(-ret));
			else
				printf("conn %s: %" PRIu64 " bytes, %" PRIu64 " zero-copy, %"
				       PRIu64 " copied, fnv1a64 %016" PRIx64 "\n",
				       c->peer, c->bytes, c->zc, c->copied, c->hash);
			fflush(stdout);
			tb += c->bytes;
			tz += c->zc;
			tc += c->copied;
			epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
			close(c->fd);
			free(c);
			open_conns--;
			done++;
		}
	}
	printf("total: %ld connections, %" PRIu64 " bytes, %" PRIu64 " zero-copy, %" PRIu64 " copied, "
	       "%ld refused\n", done, tb, tz, tc, refused);
	close(ep);
	close(lfd);
	zcrx_close(z);
	return 0;
}
