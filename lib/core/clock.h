/* clock.h: the monotonic clock every program times with. */
#ifndef PCG_CLOCK_H
#define PCG_CLOCK_H

/* Seconds of CLOCK_MONOTONIC (for intervals: its origin is arbitrary). */
double pcg_now(void);

#endif
