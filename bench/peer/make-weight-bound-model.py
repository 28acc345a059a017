#!/usr/bin/env python3
"""Writes the weight-bound model of the engine-vs-llama-server figures, generated rather than downloaded.

llama architecture in Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads, FFN 4864),
Q8_0, random weights (seeded: the same file every time), the vocabulary of the shared tiny model plus
ChatML's markers `<|im_start|>` / `<|im_end|>` as single control tokens (so node-llama-cpp and
llama-server render and tokenize the chat template the same way), and the output rows of the
end-of-generation tokens zeroed, so that greedy decoding never ends a generation early on either
server.

Usage: make-weight-bound-model.py TINY_MODEL OUT_GGUF  (needs numpy and llama.cpp's gguf-py on
PYTHONPATH: bench/peer/make-weight-bound-model.sh sets both up).
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, LlamaFileType, TokenType
from gguf.quants import quantize

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 896, 24, 14, 2, 4864
HEAD_DIM = HIDDEN // HEADS
CONTEXT = 8192
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def field(reader, name):
    return reader.fields[name].contents()


def main(tiny_path, out_path):
    tiny = GGUFReader(tiny_path)
    tokens = list(field(tiny, "tokenizer.ggml.tokens"))
    scores = list(field(tiny, "tokenizer.ggml.scores"))
    types = list(field(tiny, "tokenizer.ggml.token_type"))
    im_start, im_end = len(tokens), len(tokens) + 1
    tokens += ["<|im_start|>", "<|im_end|>"]
    scores += [0.0, 0.0]
    types += [int(TokenType.CONTROL), int(TokenType.CONTROL)]
    vocab = len(tokens)
    eos = int(field(tiny, "tokenizer.ggml.eos_token_id"))

    writer = GGUFWriter(out_path, "llama")
    writer.add_name("spark weight-bound random (Qwen2.5-0.5B shape)")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(LlamaFileType.MOSTLY_Q8_0)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(int(field(tiny, "tokenizer.ggml.bos_token_id")))
    writer.add_eos_token_id(eos)
    writer.add_eot_token_id(im_end)
    writer.add_unk_token_id(int(field(tiny, "tokenizer.ggml.unknown_token_id")))
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHATML)

    rng = np.random.default_rng(26)

    def q8(name, rows, cols, zero_rows=()):
        # numpy shape (rows, cols) is ggml's (cols, rows): `cols` is the inner dimension.
        data = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        for row in zero_rows:
            data[row, :] = 0
        writer.add_tensor(name, quantize(data, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)

    def ones(name, n):
        writer.add_tensor(name, np.ones(n, dtype=np.float32))

    q8("token_embd.weight", vocab, HIDDEN)
    for i in range(LAYERS):
        ones(f"blk.{i}.attn_norm.weight", HIDDEN)
        q8(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        q8(f"blk.{i}.attn_k.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        q8(f"blk.{i}.attn_v.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        q8(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        ones(f"blk.{i}.ffn_norm.weight", HIDDEN)
        q8(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        q8(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        q8(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    ones("output_norm.weight", HIDDEN)
    # The end-of-generation tokens' logits are always 0, below the best of 32,000 random ones.
    q8("output.weight", vocab, HIDDEN, zero_rows=(eos, im_end, im_start))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
