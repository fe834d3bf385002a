/** \file
 * The C API: scaled dot-product attention for C and for every language that calls C
 * (Rust, Go, Julia, C#, Python's ctypes). Valid C11 and C++.
 *
 * \code{.unparsed}
 *   O = dropout(softmax(logits(Q, K))) · V      logits as in attnkit/options.hpp (C++): scale,
 *                                               softcap, ALiBi, mask, causal and window, key lengths
 * \endcode
 *
 * Tensors are described, not owned: a data pointer, a dtype, a rank (0 to 4), a shape and strides
 * in elements (zero and negative strides are accepted), in the logical order of the C++ API:
 * \code{.unparsed}
 *   q [B, Hq, n, d_k]   k [B, Hkv, m, d_k]   v [B, Hkv, m, d_v]   out [B, Hq, n, d_v]
 *   lse [B, Hq, n] (f32)                     probs [B, Hq, n, m]
 * \endcode
 *
 * Errors: every function that can fail returns an attnkit_status; ATTNKIT_OK is 0. On failure,
 * attnkit_last_error_message() says what was wrong, naming the argument and the shapes as the C++
 * messages do ("k: batch size 3 does not match q's batch size 2 (q [2, 8, 128, 64], ...)"). It is
 * per thread, and stays until the next failure on that thread. No C++ exception crosses this
 * boundary, and nothing is written to an output when a call fails.
 *
 * Memory: attnkit never hands the caller memory to free. Outputs are written into the caller's
 * buffers; a KV cache is made by attnkit_kv_cache_create and released by attnkit_kv_cache_destroy.
 *
 * ABI: see "ABI rules" in docs/c-api.md. Within one major version of ATTNKIT_C_API_VERSION, functions
 * and enumerators are only added; the structs that carry struct_size only grow at their end, and a
 * field added later means "as before" when it is zero. */
#ifndef ATTNKIT_ATTNKIT_H
#define ATTNKIT_ATTNKIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(ATTNKIT_C_BUILDING) && defined(__GNUC__)
/** Marks a function of the C API for export from the shared library (empty for its callers). */
#define ATTNKIT_C_API __attribute__((visibility("default")))
#else
/** Marks a function of the C API for export from the shared library (empty for its callers). */
#define ATTNKIT_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The C API's own version: MAJOR * 1000 + MINOR. MINOR grows when something is added. */
#define ATTNKIT_C_API_VERSION 1002

/* ---- status codes ------------------------------------------------------------------------- */

/** What a C API function that can fail returns: ATTNKIT_OK (0) or one of the error codes. */
typedef int32_t attnkit_status;
/** Values of attnkit_status; the error codes are named as the C++ attnkit::ErrorCode values. */
enum {
  ATTNKIT_OK = 0,                 /**< success */
  ATTNKIT_INVALID_ARGUMENT = 1,   /**< an option out of range: scale < 0, dropout outside [0, 1), ... */
  ATTNKIT_INVALID_SHAPE = 2,      /**< wrong rank, mismatched sizes, not broadcastable */
  ATTNKIT_INVALID_DTYPE = 3,      /**< a dtype the argument or the kernel does not take, or no dtype at all */
  ATTNKIT_NULL_POINTER = 4,       /**< a required pointer is NULL, or a non-empty tensor has no data */
  ATTNKIT_OVERLAP = 5,            /**< an output's memory overlaps an input's or another output's */
  ATTNKIT_SIZE_OVERFLOW = 6,      /**< a size or byte count that does not fit in 64 bits */
  ATTNKIT_OUT_OF_MEMORY = 7,      /**< an allocation the request needs failed or would exceed the budget */
  ATTNKIT_UNSUPPORTED = 8,        /**< a valid request this build or CPU cannot serve */
  ATTNKIT_IO_ERROR = 9,           /**< reserved for file functions (none in this version) */
  ATTNKIT_FORMAT_ERROR = 10,      /**< reserved for file functions (none in this version) */
  ATTNKIT_CAPACITY_EXCEEDED = 11, /**< a KV cache is full: sequences, a sequence's length, the block pool */
  ATTNKIT_INTERNAL_ERROR = 99     /**< a failure attnkit did not foresee: a bug, please report it */
};

/** "ok", "invalid_argument", ... as the C++ error_code_name; "unknown" for any other value. */
ATTNKIT_C_API const char* attnkit_status_name(attnkit_status status);

/** What the last failed call on this thread reported; "" if none has failed. The text stays valid
 * until the next failing call on the same thread. */
ATTNKIT_C_API const char* attnkit_last_error_message(void);

/* ---- tensors ------------------------------------------------------------------------------ */

/** The element type of an attnkit_tensor: one of the ATTNKIT_F64 ... ATTNKIT_FP8_E5M2 values. */
typedef int32_t attnkit_dtype;
/** Values of attnkit_dtype, the C++ attnkit::DType values. */
enum {
  ATTNKIT_F64 = 0,   /**< IEEE binary64 (double) */
  ATTNKIT_F32 = 1,   /**< IEEE binary32 (float) */
  ATTNKIT_F16 = 2,   /**< IEEE binary16, as uint16_t bits */
  ATTNKIT_BF16 = 3,  /**< bfloat16, as uint16_t bits */
  ATTNKIT_BOOL = 4,  /**< one byte, 0 or 1: boolean masks (1 = attend) */
  ATTNKIT_I32 = 5,   /**< int32_t */
  ATTNKIT_I64 = 6,   /**< int64_t */
  ATTNKIT_INT8 = 7,  /**< KV cache storage only: blocks of 32 features with float16 scales */
  ATTNKIT_INT4 = 8,  /**< KV cache storage only */
  ATTNKIT_FP8_E4M3 = 9,  /**< KV cache storage only: OCP FP8 E4M3 in blocks of 32 with scales */
  ATTNKIT_FP8_E5M2 = 10, /**< KV cache storage only: OCP FP8 E5M2 in blocks of 32 with scales */
  ATTNKIT_DTYPE_DEFAULT = -1  /**< in a cache's key_dtype / value_dtype: as its dtype */
};

/** The most dimensions an attnkit_tensor has. */
#define ATTNKIT_MAX_RANK 4

/** A description of caller memory as a strided tensor; attnkit never owns or frees it. */
typedef struct attnkit_tensor {
  void* data;                         /**< the first element; read only for inputs */
  attnkit_dtype dtype;                /**< the element type */
  int32_t rank;                       /**< 0 to ATTNKIT_MAX_RANK */
  int64_t shape[ATTNKIT_MAX_RANK];    /**< the first `rank` entries are used */
  int64_t strides[ATTNKIT_MAX_RANK];  /**< in elements, not bytes */
} attnkit_tensor;

/** Fills *tensor with a row-major (C order) description of `data`. */
ATTNKIT_C_API attnkit_status attnkit_tensor_contiguous(attnkit_tensor* tensor, void* data, attnkit_dtype dtype,
                                                       int32_t rank, const int64_t* shape);

/* ---- attention ---------------------------------------------------------------------------- */

/** Causal masking of query i (of n) against key j (of m): one of the ATTNKIT_CAUSAL_* values. */
typedef int32_t attnkit_causal;
/** Values of attnkit_causal. */
enum {
  ATTNKIT_CAUSAL_NONE = 0,         /**< not causal: every key is visible (other masks aside) */
  ATTNKIT_CAUSAL_TOP_LEFT = 1,     /**< key j visible when j <= i (PyTorch's is_causal) */
  ATTNKIT_CAUSAL_BOTTOM_RIGHT = 2  /**< key j visible when j <= i + (m - n) (FlashAttention >= 2.1) */
};

/** Which implementation runs: one of the ATTNKIT_KERNEL_* values. */
typedef int32_t attnkit_kernel;
/** Values of attnkit_kernel. */
enum {
  ATTNKIT_KERNEL_AUTOMATIC = 0,  /**< the fast kernel for f32, f16, bf16; the float64 reference for f64 */
  ATTNKIT_KERNEL_REFERENCE = 1,  /**< the float64 reference, any floating dtype */
  ATTNKIT_KERNEL_FAST = 2        /**< the fast kernel; f64 is refused with ATTNKIT_UNSUPPORTED */
};

/** The largest struct_size any struct of this API may carry, now or in a later version: a larger one
 * is refused with ATTNKIT_INVALID_ARGUMENT before any byte past the known struct is read, so a
 * garbage struct_size cannot make attnkit read far past the caller's struct. */
#define ATTNKIT_MAX_STRUCT_SIZE 4096

/** Everything an attention call computes beyond Q, K and V. Initialise with attnkit_options_init,
 * then set what differs; a struct whose struct_size is 0 is refused. Pointers are read during the
 * call only. */
typedef struct attnkit_options {
  size_t struct_size;          /**< sizeof(attnkit_options): set by attnkit_options_init */
  double scale;                /**< 0: 1/sqrt(d_k); else finite and > 0 */
  attnkit_causal causal;       /**< causal masking; default ATTNKIT_CAUSAL_NONE */
  attnkit_kernel kernel;       /**< which implementation runs; default ATTNKIT_KERNEL_AUTOMATIC */
  int64_t window_left;         /**< keys i' - left <= j <= i' + right are kept; -1: unbounded (any
                                  side up to INT64_MAX is exact: no overflow) */
  int64_t window_right;        /**< the window's right side, as window_left; -1: unbounded */
  const attnkit_tensor* mask;  /**< NULL, or a bool keep-mask or floating additive bias, [n, m] or
                                  [B|1, Hq|1, n|1, m|1] (size-1 dimensions broadcast) */
  const int64_t* key_lengths;  /**< NULL, or one per batch entry: keys j >= key_lengths[b] are masked */
  int64_t key_lengths_count;   /**< entries of key_lengths (B when it is not NULL) */
  const float* alibi_slopes;   /**< NULL, or one per query head */
  int64_t alibi_slopes_count;  /**< entries of alibi_slopes (Hq when it is not NULL) */
  double softcap;              /**< 0: off; else s = softcap * tanh(s / softcap) */
  double dropout_p;            /**< in [0, 1); kept weights are scaled by 1 / (1 - p) */
  uint64_t seed;               /**< the dropout stream: the same seed drops the same elements */
  const float* sinks;          /**< NULL, or one attention-sink logit per query head: each joins its
                                  rows' softmax denominator and weights no value (since 1002) */
  int64_t sinks_count;         /**< entries of sinks (Hq when it is not NULL) */
} attnkit_options;

/** Sets every field to its default: no mask, not causal, unbounded window, no dropout, automatic kernel. */
ATTNKIT_C_API void attnkit_options_init(attnkit_options* options);

/** out = attention(q, k, v). lse and probs are optional outputs (NULL: not wanted); options NULL
 * means the defaults. Every element of every output is written; a query that sees no key gives
 * out = 0, lse = -inf, probs = 0, never NaN. */
ATTNKIT_C_API attnkit_status attnkit_forward(const attnkit_tensor* q, const attnkit_tensor* k, const attnkit_tensor* v,
                                             const attnkit_tensor* out, const attnkit_options* options,
                                             const attnkit_tensor* lse, const attnkit_tensor* probs);

/** Gradients of a loss L given d_out = dL/dout: dq, dk, dv (written, not accumulated). out and lse
 * are what attnkit_forward returned for the same inputs and options. */
ATTNKIT_C_API attnkit_status attnkit_backward(const attnkit_tensor* q, const attnkit_tensor* k, const attnkit_tensor* v,
                                              const attnkit_tensor* out, const attnkit_tensor* d_out,
                                              const attnkit_tensor* lse, const attnkit_tensor* dq,
                                              const attnkit_tensor* dk, const attnkit_tensor* dv,
                                              const attnkit_options* options);

/** attnkit_backward that also writes d_sinks ([Hq] f32, or NULL: not wanted), the gradient of the
 * options' sinks, summed over the batch and the rows (since 1002). */
ATTNKIT_C_API attnkit_status attnkit_backward_with_sinks(const attnkit_tensor* q, const attnkit_tensor* k,
                                                         const attnkit_tensor* v, const attnkit_tensor* out,
                                                         const attnkit_tensor* d_out, const attnkit_tensor* lse,
                                                         const attnkit_tensor* dq, const attnkit_tensor* dk,
                                                         const attnkit_tensor* dv, const attnkit_options* options,
                                                         const attnkit_tensor* d_sinks);

/* ---- the KV cache ------------------------------------------------------------------------- */

/** A key/value cache for incremental decoding (opaque; see attnkit::KVCache in the C++ API). */
typedef struct attnkit_kv_cache attnkit_kv_cache; /* opaque */

/** How a KV cache lays out each sequence's rows: one of the ATTNKIT_KV_CACHE_* values. */
typedef int32_t attnkit_kv_cache_layout;
/** Values of attnkit_kv_cache_layout. */
enum {
  ATTNKIT_KV_CACHE_CONTIGUOUS = 0,  /**< a slot of max_sequence_length rows per sequence */
  ATTNKIT_KV_CACHE_PAGED = 1        /**< blocks of block_size tokens from a shared pool */
};

/** How an int8 or int4 KV cache quantises its keys: one of the ATTNKIT_KEYS_* values. */
typedef int32_t attnkit_key_quantization;
/** Values of attnkit_key_quantization. */
enum {
  ATTNKIT_KEYS_PER_TOKEN = 0,   /**< a scale per block of 32 features of each token, as values */
  ATTNKIT_KEYS_PER_CHANNEL = 1  /**< a scale per feature over each group of 32 tokens */
};

/** The shape, capacity and storage of a KV cache. Initialise with attnkit_kv_cache_config_init,
 * then set what differs. */
typedef struct attnkit_kv_cache_config {
  size_t struct_size;            /**< sizeof(attnkit_kv_cache_config): set by attnkit_kv_cache_config_init */
  int64_t num_kv_heads;          /**< Hkv: key/value heads per token */
  int64_t head_dim;              /**< d_k */
  int64_t value_dim;             /**< d_v; 0: head_dim */
  int64_t max_sequences;         /**< alive at once; default 1 */
  int64_t max_sequence_length;   /**< tokens one sequence may hold */
  attnkit_kv_cache_layout layout;  /**< contiguous (default) or paged */
  attnkit_dtype dtype;           /**< storage: F32 (default), F16, BF16, INT8, INT4, FP8_E4M3, FP8_E5M2 */
  int64_t block_size;            /**< paged: tokens per block, a power of two; default 16 */
  int64_t num_blocks;            /**< paged: the pool; 0: enough for every sequence at full length */
  attnkit_dtype key_dtype;       /**< ATTNKIT_DTYPE_DEFAULT: as dtype */
  attnkit_dtype value_dtype;     /**< ATTNKIT_DTYPE_DEFAULT: as dtype */
  attnkit_key_quantization key_quantization;  /**< int8 and int4 keys: ATTNKIT_KEYS_PER_TOKEN (default) or _PER_CHANNEL */
} attnkit_kv_cache_config;

/** Sets every field to its default (see the fields); num_kv_heads, head_dim and
 * max_sequence_length must then be set. */
ATTNKIT_C_API void attnkit_kv_cache_config_init(attnkit_kv_cache_config* config);

/** Allocates all of the cache's memory now; *cache is set on success only. */
ATTNKIT_C_API attnkit_status attnkit_kv_cache_create(const attnkit_kv_cache_config* config, attnkit_kv_cache** cache);
/** Releases the cache (NULL is ignored). */
ATTNKIT_C_API void attnkit_kv_cache_destroy(attnkit_kv_cache* cache);

/** Starts a new, empty sequence and sets *sequence to its id; ATTNKIT_CAPACITY_EXCEEDED when
 * max_sequences are alive. */
ATTNKIT_C_API attnkit_status attnkit_kv_cache_add_sequence(attnkit_kv_cache* cache, int64_t* sequence);
/** Forgets the sequence; its slot or blocks are reused by later sequences. */
ATTNKIT_C_API attnkit_status attnkit_kv_cache_free_sequence(attnkit_kv_cache* cache, int64_t sequence);
/** Sets *length to the number of tokens the sequence holds. */
ATTNKIT_C_API attnkit_status attnkit_kv_cache_length(const attnkit_kv_cache* cache, int64_t sequence, int64_t* length);
/** How many more tokens the sequence can take now, in *room. */
ATTNKIT_C_API attnkit_status attnkit_kv_cache_room(const attnkit_kv_cache* cache, int64_t sequence, int64_t* room);

/** Appends t tokens to each of `count` sequences: keys [count, Hkv, t, d_k] and values
 * [count, Hkv, t, d_v] (rank 3, [Hkv, t, d], when count is 1), any floating dtype and strides.
 * All sequences grow, or on any error none does. */
ATTNKIT_C_API attnkit_status attnkit_kv_cache_append(attnkit_kv_cache* cache, const int64_t* sequences, int64_t count,
                                                     const attnkit_tensor* keys, const attnkit_tensor* values);

/** Options of attention over the cache: always causal, aligned bottom-right per sequence. Initialise
 * with attnkit_attend_options_init, then set what differs. */
typedef struct attnkit_attend_options {
  size_t struct_size;         /**< sizeof(attnkit_attend_options): set by attnkit_attend_options_init */
  double scale;               /**< 0: 1/sqrt(d_k) */
  attnkit_kernel kernel;      /**< which implementation runs; default ATTNKIT_KERNEL_AUTOMATIC */
  int32_t reserved;           /**< 0 */
  int64_t window_left;        /**< -1: unbounded */
  int64_t window_right;       /**< -1: unbounded */
  const float* alibi_slopes;  /**< NULL, or one per query head */
  int64_t alibi_slopes_count; /**< entries of alibi_slopes (Hq when it is not NULL) */
  double softcap;             /**< 0: off; else s = softcap * tanh(s / softcap) */
  const float* sinks;         /**< NULL, or one attention-sink logit per query head (since 1002) */
  int64_t sinks_count;        /**< entries of sinks (Hq when it is not NULL) */
} attnkit_attend_options;

/** Sets every field to its default: scale 1/sqrt(d_k), unbounded window, no ALiBi, no softcap,
 * automatic kernel. */
ATTNKIT_C_API void attnkit_attend_options_init(attnkit_attend_options* options);

/** out[b] = attention(q[b], the cached keys and values of sequences[b]) for q [count, Hq, n, d_k]
 * and out [count, Hq, n, d_v]: the queries are each sequence's last n tokens, already appended.
 * lse [count, Hq, n] f32 is optional (NULL); options NULL means the defaults. */
ATTNKIT_C_API attnkit_status attnkit_kv_cache_attend(const attnkit_kv_cache* cache, const int64_t* sequences,
                                                     int64_t count, const attnkit_tensor* q, const attnkit_tensor* out,
                                                     const attnkit_attend_options* options, const attnkit_tensor* lse);

/* ---- the runtime -------------------------------------------------------------------------- */

/** The library's version, "MAJOR.MINOR.PATCH". */
ATTNKIT_C_API const char* attnkit_version(void);
/** The C API's version: the ATTNKIT_C_API_VERSION the library was built with. */
ATTNKIT_C_API int32_t attnkit_c_api_version(void);

/** Sets the threads the kernels use: n <= 0 restores the default (ATTNKIT_NUM_THREADS, else every
 * core). */
ATTNKIT_C_API attnkit_status attnkit_set_num_threads(int32_t n);
/** The number of threads the kernels use now. */
ATTNKIT_C_API int32_t attnkit_num_threads(void);

/** Forces the SIMD target of the fast kernels, by name: "scalar", "avx2", "avx512", "avx512_bf16",
 * and the emulated test targets. NULL or "default" returns to the default. ATTNKIT_UNSUPPORTED names
 * the CPU feature a target needs and this CPU lacks. */
ATTNKIT_C_API attnkit_status attnkit_set_target(const char* name);
/** Sets *name to the name of the target the fast kernels use now (a static string). */
ATTNKIT_C_API attnkit_status attnkit_active_target(const char** name);

/** The bytes one request (a buffer, a cache's pools) may take; 0 restores what the system reports.
 * A larger request fails with ATTNKIT_OUT_OF_MEMORY before anything is allocated. */
ATTNKIT_C_API attnkit_status attnkit_set_memory_limit(uint64_t bytes);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNKIT_ATTNKIT_H */
