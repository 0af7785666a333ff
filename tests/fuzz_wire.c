/* libFuzzer harness for the wire codec. Input layout, chosen so that one
 * corpus entry exercises every decoder:
 *   [0, 16)   a frame header, fed to eccl_wire_header_decode;
 *   [16, ...) the payload, decoded as a control message of the header's type
 *             field (even if the header itself was rejected, so the payload
 *             decoders are reached without first solving the magic);
 *   and, when the payload is long enough, its first 32 bytes as a data
 *   header with the header's length field as the frame length.
 * Whatever decodes must re-encode to the very same bytes; anything else,
 * or any sanitizer report, aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* A whole control frame (64 KiB): kept off the fuzzer's stack. */
static uint8_t frame[ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_MAX_CONTROL];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < ECCL_WIRE_HEADER_SIZE)
        return 0;

    eccl_wire_header h;
    uint8_t back[ECCL_WIRE_DATA_HEADER_SIZE];
    if (eccl_wire_header_decode(data, &h) == ECCL_OK) {
        eccl_wire_header_encode(h.type, h.length, back);
        if (memcmp(back, data, ECCL_WIRE_HEADER_SIZE) != 0)
            abort();
    } else {
        h.type = (uint16_t)(data[6] | data[7] << 8);
        h.length = le32(data + 8);
    }

    const uint8_t *payload = data + ECCL_WIRE_HEADER_SIZE;
    size_t plen = size - ECCL_WIRE_HEADER_SIZE;
    /* A decoded view borrows `payload`, which outlives the re-encode. */
    eccl_msg msg;
    if (plen <= UINT32_MAX &&
        eccl_wire_decode(h.type, payload, (uint32_t)plen, &msg) == ECCL_OK) {
        size_t n = eccl_wire_encode(&msg, frame, sizeof(frame));
        if (n != ECCL_WIRE_HEADER_SIZE + plen ||
            memcmp(frame + ECCL_WIRE_HEADER_SIZE, payload, plen) != 0 ||
            plen > eccl_wire_max_length(h.type))
            abort();
    }

    eccl_wire_data d;
    if (plen >= ECCL_WIRE_DATA_HEADER_SIZE &&
        eccl_wire_data_decode(payload, h.length, &d) == ECCL_OK) {
        eccl_wire_data_encode(&d, back);
        /* A BULK frame is the header alone: its `len` bytes travel as the
         * conn's next bulk message, not in this frame. */
        uint64_t inline_len = (d.flags & ECCL_WIRE_DATA_BULK) ? 0 : d.len;
        if (memcmp(back, payload, ECCL_WIRE_DATA_HEADER_SIZE) != 0 ||
            ECCL_WIRE_DATA_HEADER_SIZE + inline_len != h.length)
            abort();
        /* A quantised payload: its record must re-encode to the same bytes. */
        eccl_quant_meta m;
        const uint8_t *codes;
        size_t have = plen - ECCL_WIRE_DATA_HEADER_SIZE;
        const uint8_t *qp = payload + ECCL_WIRE_DATA_HEADER_SIZE;
        if ((d.flags & ECCL_WIRE_DATA_QUANT) && have >= d.len &&
            eccl_wire_qdata_decode(qp, d.len, &m, &codes) == ECCL_OK) {
            uint8_t rec[ECCL_QUANT_META_BYTES];
            if (codes != qp + ECCL_QUANT_META_BYTES || eccl_wire_qdata_encode(&m, rec) != ECCL_OK ||
                memcmp(rec, qp, sizeof rec) != 0)
                abort();
        }
    }
    return 0;
}
