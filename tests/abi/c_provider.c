/*
 * A provider written in plain C99 against kpr/provider.h: proof that the contract needs no C++.
 * Built as libkpr_mock_c.so into ${build}/tests/mockproviders/cprovider; serves f32 gemv on the CPU
 * with score 150 and a straightforward loop.
 */
#include <kpr/ggml_blocks.h>
#include <kpr/provider.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct c_prepared {
    kpr_op_desc op;
    const float *w;
} c_prepared;

static const kpr_provider_identity c_identity = {
    sizeof(kpr_provider_identity), KPR_DEVICE_CPU, "mock_c", "1.0.0", "mock", "a provider written in C", NULL, 0, NULL,
    0, 0};

static const kpr_provider_identity *c_identity_fn(void *state) {
    (void)state;
    return &c_identity;
}

static kpr_status c_query(void *state, const kpr_op_desc *op, const kpr_device_desc *device,
                          const kpr_option_set *options, kpr_offer *offer, kpr_error *err) {
    (void)state, (void)device, (void)options;
    if (!op || !offer) {
        if (err) snprintf(err->message, sizeof err->message, "mock_c: null argument");
        return KPR_ERR_INVALID_ARGUMENT;
    }
    if (op->weight_type != KPR_TYPE_F32 || op->kind != KPR_OP_GEMV) {
        offer->accepted = 0;
        offer->decline_code = KPR_ERR_UNSUPPORTED;
        snprintf(offer->reason, sizeof offer->reason, "mock_c serves only f32 gemv");
        return KPR_OK;
    }
    offer->accepted = 1;
    offer->score = 150;
    offer->prepared_bytes = 0;
    offer->workspace_bytes = 0;
    snprintf(offer->reason, sizeof offer->reason, "mock_c: a C loop");
    return KPR_OK;
}

static kpr_status c_prepare(void *state, const kpr_op_desc *op, const kpr_device_desc *device,
                            const kpr_option_set *options, const kpr_weights *weights, kpr_prepared **out,
                            kpr_error *err) {
    c_prepared *p;
    (void)state, (void)device, (void)options;
    if (!op || !weights || !out || weights->bytes != op->rows * op->cols * sizeof(float)) {
        if (err) snprintf(err->message, sizeof err->message, "mock_c: bad prepare arguments");
        return KPR_ERR_INVALID_ARGUMENT;
    }
    p = (c_prepared *)malloc(sizeof *p);
    if (!p) return KPR_ERR_OUT_OF_MEMORY;
    p->op = *op;
    p->w = (const float *)weights->data;
    *out = (kpr_prepared *)p;
    return KPR_OK;
}

static kpr_status c_run(void *state, kpr_prepared *prepared, const kpr_run_args *args, kpr_error *err) {
    const c_prepared *p = (const c_prepared *)prepared;
    uint32_t j;
    uint64_t r, k;
    (void)state;
    if (!p || !args || !args->x || !args->y) {
        if (err) snprintf(err->message, sizeof err->message, "mock_c: bad run arguments");
        return KPR_ERR_INVALID_ARGUMENT;
    }
    for (j = 0; j < args->ncols; ++j)
        for (r = 0; r < p->op.rows; ++r) {
            double acc = 0;
            for (k = 0; k < p->op.cols; ++k) acc += (double)p->w[r * p->op.cols + k] * (double)args->x[j * p->op.cols + k];
            args->y[j * p->op.rows + r] = (float)acc;
        }
    return KPR_OK;
}

static void c_release(void *state, kpr_prepared *prepared) {
    (void)state;
    free(prepared);
}

static const kpr_provider_v1 c_table = {
    sizeof(kpr_provider_v1), KPR_ABI_VERSION, NULL, NULL, c_identity_fn, NULL, NULL, c_query, c_prepare, c_run,
    c_release, NULL, NULL, NULL};

KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry(const kpr_handshake_offer *offer, kpr_handshake_answer *answer,
                                                  kpr_error *err) {
    if (!offer || !answer) return KPR_ERR_INVALID_ARGUMENT;
    if (KPR_VERSION_MAJOR(offer->abi_min) > KPR_ABI_VERSION_MAJOR ||
        KPR_VERSION_MAJOR(offer->abi_max) < KPR_ABI_VERSION_MAJOR) {
        answer->abi_version = KPR_ABI_VERSION;
        if (err) snprintf(err->message, sizeof err->message, "mock_c speaks ABI 1.x only");
        return KPR_ERR_VERSION;
    }
    answer->abi_version = KPR_ABI_VERSION;
    answer->table = &c_table;
    return KPR_OK;
}
