/* modelserver.h: the model server behind draftd and targetd: one model, many
 * sessions, each a KV cache brought to the position a request names
 * (truncate, append), then "propose" (sample n tokens autoregressively and
 * return them with their distributions) or "score" (one forward pass over
 * the block, the distributions of its last n positions). The two programs
 * differ only in their defaults; see man/draftd.8 and man/targetd.8. */
#ifndef PCG_MODELSERVER_H
#define PCG_MODELSERVER_H

typedef enum ms_role { MS_DRAFT, MS_TARGET } ms_role;

/* The whole program: parses argv, serves until SIGTERM or SIGINT. Returns
 * the exit status (0, 1 failure, 2 usage). */
int modelserver_main(int argc, char **argv, ms_role role);

#endif
