/* service.c: see service.h. */
#include "service.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t pcg_daemon_stop;

static void on_signal(int sig)
{
	(void)sig;
	pcg_daemon_stop = 1;
}

void pcg_daemon_passive_openmp(char **argv)
{
	char self[4096];
	ssize_t n;

	if (getenv("OMP_WAIT_POLICY") != NULL)
		return;
	n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return;
	self[n] = '\0';
	setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
	execv(self, argv);
	/* could not: go on with the default */
}

void pcg_daemon_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}
