/* hsring.h: the C API of libhsring.so, for targets and drafters that are not hsring's own
 * programs (a PyTorch model through python/hsring, or any language with a C FFI). A
 * producer is a numbered target worker of a ring, a consumer a numbered drafter: each
 * holds its index's liveness lock, opens a new epoch, recovers what its previous epoch
 * left, and keeps the ring protocol (docs/ring-protocol.md) exactly as hsring-target and
 * hsring-drafter do. docs/c-api.md has the walkthrough.
 *
 * Errors: every function returns an hs_status; nothing throws or aborts across this ABI.
 * A negative status is an error whose message hs_last_error() returns (per thread, valid
 * until this thread's next failing call). HS_STOPPED and HS_TIMEOUT are not errors.
 *
 * Thread safety: a producer or consumer handle is used by one thread at a time (the
 * library's own publisher thread excepted). Different handles are independent.
 *
 * Determinism (exactly-once batches): a batch's content must be a pure function of its
 * batch id. A producer that crashes after binding batch X to a slot is restarted and gets
 * X again (re-produced jobs come first); consumers see X once. hsring's shard reader keeps
 * this rule by construction; a caller that fills tokens itself must keep it too. */
#ifndef HSRING_HSRING_H_
#define HSRING_HSRING_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HS_API __attribute__((visibility("default")))
#else
#define HS_API
#endif

/* Bumped when a struct or a signature below changes. */
#define HS_API_VERSION 3

typedef enum hs_status {
  HS_OK = 0,
  HS_STOPPED = 1, /* the run is draining or a stop was requested: no more jobs or batches */
  HS_TIMEOUT = 2, /* nothing within the timeout; call again */
  HS_ERR_INVALID_ARGUMENT = -1, /* a NULL pointer, an index out of range, a bad option */
  HS_ERR_NOT_FOUND = -2,        /* no ring of that name */
  HS_ERR_RING = -3,             /* the ring was refused: not hsring's, other version, owner, mode */
  HS_ERR_BUSY = -4,             /* a live process holds this worker index */
  HS_ERR_STATE = -5,            /* wrong order: publish without a job, a double release, ... */
  HS_ERR_SHAPE = -6,            /* a buffer's size, shape, dtype or values do not fit the ring */
  HS_ERR_LOST_SLOT = -7,        /* the slot was taken from us (we were presumed dead): exit */
  HS_ERR_DATA = -8,             /* the token shards could not be read */
  HS_ERR_CUDA = -9,             /* a CUDA call failed */
  HS_ERR_UNSUPPORTED = -10,     /* a CUDA entry point of a library built without CUDA */
  HS_ERR_INTERNAL = -70
} hs_status;

/* The message of this thread's last error ("" when none). */
HS_API const char* hs_last_error(void);
/* The symbolic name of a status: "HS_ERR_SHAPE". */
HS_API const char* hs_status_name(hs_status status);
/* HS_API_VERSION of the library that is loaded. */
HS_API int hs_api_version(void);
/* Nonzero when the library was built with the CUDA entry points. */
HS_API int hs_has_cuda(void);
/* Makes every producer and consumer of this process return HS_STOPPED from its next wait
 * (what a SIGTERM handler calls: the launcher drains a run with SIGTERM). Async-signal-safe. */
HS_API void hs_request_stop(void);

enum { HS_DTYPE_BF16 = 1, HS_DTYPE_FP16 = 2, HS_DTYPE_FP32 = 3 };
enum { HS_CONTENT_SYNTHETIC = 0, HS_CONTENT_MODEL = 1 };
#define HS_MAX_LAYERS 16

typedef struct hs_ring_shape {
  uint32_t slot_count;
  uint32_t max_tokens; /* tokens per slot */
  uint32_t hidden_size;
  uint32_t num_layers;   /* K captured layers */
  uint32_t dtype;        /* HS_DTYPE_* */
  uint32_t dtype_size;   /* bytes per element */
  uint32_t split_layers; /* 1: K regions [max_tokens, H]; 0: one [max_tokens, K*H] */
  uint32_t num_targets;
  uint32_t num_drafters;
  uint32_t hs_min_ready;
  uint32_t content;    /* HS_CONTENT_* */
  uint32_t vocab_size; /* model rings: tokens and labels lie in [0, vocab_size) */
  int32_t layer_ids[HS_MAX_LAYERS];
  uint64_t batch_limit; /* 0: unbounded */
} hs_ring_shape;

/* Attaches read-only with the workers' validation, copies the shape out, detaches. */
HS_API hs_status hs_ring_shape_of(const char* ring, hs_ring_shape* out);

/* ---- Producer (a target worker) ---- */

enum {
  HS_TOKENS_AUTO = 0,   /* model ring: hsring's shard reader; synthetic ring: synthetic */
  HS_TOKENS_CALLER = 1, /* the caller sets every job's tokens (hs_job_set_tokens) */
};

typedef struct hs_producer_options {
  const char* data_dir;    /* token shards (hsring data pack); NULL or "": the built-in corpus */
  uint64_t data_seed;      /* batch packing and epoch order: the launcher's --data-seed */
  uint32_t read_ahead;     /* batches read ahead; 0: 4 */
  uint32_t tokens_from;    /* HS_TOKENS_* */
  uint32_t lock_wait_ms;   /* how long to wait for a dying predecessor's lock; 0: 2000 */
  uint32_t expected_epoch; /* nonzero: refuse to start unless this start opens that epoch */
  uint32_t nnodes;         /* machines sharing the data; 0: 1 */
  uint32_t node_rank;
} hs_producer_options;

typedef struct hs_producer hs_producer;

/* A batch to produce, bound to a slot. Its arrays are the slot's own (host memory):
 * tokens, positions and doc_offsets are filled unless tokens_from is HS_TOKENS_CALLER. */
typedef struct hs_job {
  uint64_t ticket; /* names the job in the calls below; never repeats */
  uint64_t batch_id;
  uint32_t slot;
  uint32_t token_count;
  uint32_t num_docs;
  uint32_t reproduced;  /* 1: a previous epoch bound it and died; written again now */
  int32_t* tokens;      /* [max_tokens] */
  int32_t* positions;   /* [max_tokens] */
  int32_t* doc_offsets; /* [max_tokens + 1], cu_seqlens: num_docs + 1 used */
  int32_t* labels;      /* [max_tokens] */
  /* [token_count], or NULL when the producer knows no mask (caller's or synthetic tokens):
   * 1 where the label at t counts, 0 where the shard's loss mask leaves the next token out
   * (t + 1 in t's document and not counted), which hs_job_write_labels writes as -100
   * whatever the caller gives, as hsring-target does. The last position of each document
   * counts. Valid until the job is published. (API version 2.) */
  const uint8_t* loss_mask;
} hs_job;

/* Starts target `index` of `ring` (NULL options: defaults): liveness lock, new epoch,
 * recovery of the previous epoch's slots and adoption of its unpublished batches. */
HS_API hs_status hs_producer_open(const char* ring, uint32_t index,
                                  const hs_producer_options* options, hs_producer** out);
/* Finishes publishing what is in flight (CUDA path), marks the worker exited and frees
 * the handle. Jobs taken and not published stay bound for the next incarnation. */
HS_API hs_status hs_producer_close(hs_producer* producer);
HS_API hs_status hs_producer_shape(const hs_producer* producer, hs_ring_shape* out);
/* This incarnation's epoch. */
HS_API uint32_t hs_producer_epoch(const hs_producer* producer);
/* The ring's memory as the handle maps it (API version 3): the mapping's `base` and `size`,
 * and `fd`, a new read-only descriptor of the segment that the caller owns and closes. It
 * is a new open file description, so it never carries the handle's liveness lock. Every
 * address the handle hands out lies at its offset from `base`: a caller whose views of slot
 * memory may outlive the handle (python/hsring) maps `fd` itself and keeps that mapping as
 * long as its views, so reading them after close reads the ring, never unmapped memory. */
HS_API hs_status hs_producer_segment(const hs_producer* producer, const void** base, uint64_t* size,
                                     int* fd);

/* The next job: first the batches a previous epoch left unpublished, then the shard in
 * order. Waits up to timeout_ms (0: one attempt) for a free slot. HS_TIMEOUT when the ring
 * stayed full, or when every batch of the shard's batch limit is published and the run
 * goes on (stay attached and call again: an exit is a crash); HS_STOPPED when the run
 * stops. HS_ERR_STATE at the shard's end while jobs are still open. */
HS_API hs_status hs_producer_next_job(hs_producer* producer, uint32_t timeout_ms, hs_job* out);

/* HS_TOKENS_CALLER: the job's tokens, positions (restarting in each document) and
 * cu_seqlens doc offsets (num_docs + 1 entries, from 0 to count). Copied into the slot. */
HS_API hs_status hs_job_set_tokens(hs_producer* producer, uint64_t ticket, const int32_t* tokens,
                                   const int32_t* positions, uint32_t count,
                                   const int32_t* doc_offsets, uint32_t num_docs);
/* Copies captured layer `layer` from host memory: token_count rows of hidden_size
 * elements of the ring's dtype, row_pitch bytes apart (0: dense). */
HS_API hs_status hs_job_write_layer(hs_producer* producer, uint64_t ticket, uint32_t layer,
                                    const void* host, uint64_t row_pitch);
/* token_count labels (model rings: each in [0, vocab_size), or -100: not trained on).
 * Where the job's loss_mask is 0 the slot gets -100 instead of the caller's value. */
HS_API hs_status hs_job_write_labels(hs_producer* producer, uint64_t ticket, const int32_t* labels,
                                     uint32_t count);
/* Layers first_layer .. first_layer + count - 1 in one call (hs_job_write_layer for each):
 * hosts[i] and row_pitches[i] (row_pitches NULL: every source dense). Nothing is written
 * unless every source passes the checks. */
HS_API hs_status hs_job_write_layers(hs_producer* producer, uint64_t ticket, uint32_t first_layer,
                                     uint32_t count, const void* const* hosts,
                                     const uint64_t* row_pitches);
/* Publishes the job: every layer (and on model rings the labels) must have been written.
 * With CUDA copies enqueued, the library's publisher thread publishes once the copies'
 * event has completed and this returns at once; hs_producer_flush waits for it. */
HS_API hs_status hs_job_publish(hs_producer* producer, uint64_t ticket);

/* CUDA builds: enqueues layer `layer`'s copy from device memory (token_count rows,
 * row_pitch bytes apart, 0: dense) into the pinned slot on `stream` (a cudaStream_t, e.g.
 * torch's current stream; NULL: the legacy default stream). Every copy of one job goes on
 * one stream. Returns once enqueued. The caller must not free or overwrite the source
 * before the job is published (hs_producer_flush, or a later job's completion). */
HS_API hs_status hs_job_copy_layer_device(hs_producer* producer, uint64_t ticket, uint32_t layer,
                                          const void* device, uint64_t row_pitch, void* stream);
/* CUDA builds: hs_job_copy_layer_device for layers first_layer .. first_layer + count - 1
 * in one call, all on `stream` (row_pitches NULL: every source dense). Nothing is
 * enqueued unless every source passes the checks. The one call a PyTorch target's
 * write_layers makes: its critical path is this and hs_job_publish. */
HS_API hs_status hs_job_copy_layers_device(hs_producer* producer, uint64_t ticket,
                                           uint32_t first_layer, uint32_t count,
                                           const void* const* devices, const uint64_t* row_pitches,
                                           void* stream);
/* Waits until every job handed to the publisher thread is published; the first failure
 * of the thread (a CUDA error, a lost slot), if any. */
HS_API hs_status hs_producer_flush(hs_producer* producer);

/* ---- Consumer (a drafter worker) ---- */

typedef struct hs_consumer_options {
  uint32_t lock_wait_ms;   /* 0: 2000 */
  uint32_t expected_epoch; /* nonzero: refuse to start unless this start opens that epoch */
  uint64_t seed;           /* of the random pull */
} hs_consumer_options;

typedef struct hs_consumer hs_consumer;

/* A claimed READY slot; pointers into the slot, valid until its release. */
typedef struct hs_batch {
  uint64_t ticket;
  uint64_t batch_id;
  uint32_t slot;
  uint32_t token_count;
  uint32_t num_docs;
  uint32_t length_bucket;
  const int32_t* tokens;
  const int32_t* positions;
  const int32_t* doc_offsets;
  const int32_t* labels;
  const void* layers[HS_MAX_LAYERS]; /* layer k's first row */
  uint64_t layer_row_pitch;          /* bytes from one row of a layer to the next */
} hs_batch;

HS_API hs_status hs_consumer_open(const char* ring, uint32_t index,
                                  const hs_consumer_options* options, hs_consumer** out);
/* Gives unreleased batches back to READY, marks the worker exited, frees the handle. */
HS_API hs_status hs_consumer_close(hs_consumer* consumer);
HS_API hs_status hs_consumer_shape(const hs_consumer* consumer, hs_ring_shape* out);
HS_API uint32_t hs_consumer_epoch(const hs_consumer* consumer);
/* hs_producer_segment for a consumer. */
HS_API hs_status hs_consumer_segment(const hs_consumer* consumer, const void** base, uint64_t* size,
                                     int* fd);
/* Waits (up to timeout_ms; 0: one attempt) until hs_min_ready slots are READY (one once
 * no more can come), then claims one at random. HS_TIMEOUT when none came; HS_STOPPED
 * when the run stops. */
HS_API hs_status hs_consumer_next(hs_consumer* consumer, uint32_t timeout_ms, hs_batch* out);
/* Marks the batch consumed and frees its slot. HS_ERR_STATE for a ticket not held. */
HS_API hs_status hs_consumer_release(hs_consumer* consumer, uint64_t ticket);
/* CUDA builds: copies the batch's hidden states into `device` as [token_count, K*H] of
 * the ring's dtype (split layers through one pitched 2-D copy each), adds noise_std *
 * N(0, 1) when noise_std > 0 (Philox, seeded by seed and step), on `stream`, and waits
 * for it, so the slot may be released right after. */
HS_API hs_status hs_consumer_copy_to_device(hs_consumer* consumer, uint64_t ticket, void* device,
                                            uint64_t device_bytes, void* stream, float noise_std,
                                            uint64_t seed, uint64_t step);

#ifdef __cplusplus
}
#endif

#endif /* HSRING_HSRING_H_ */
