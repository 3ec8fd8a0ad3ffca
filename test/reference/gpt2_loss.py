"""GPT-2's loss on a corpus's held-out tokens, as transformers' GPT2LMHeadModel computes it, in numpy.

Independent of atoll's code: it reads a transformers GPT-2 folder (config.json, model.safetensors with
GPT2LMHeadModel's or GPT2Model's names, Conv1D weights stored (in, out)) and computes
x @ W + b per layer, gelu_new, causal softmax attention, the tied head and the mean cross-entropy.
The held-out tokens are cut as atoll's splitCorpus/evalBatches document: a text's bytes in 8,192-byte
chunks, every 10th chunk held out; a shard folder's held-out shard as it is (index.json names it; llm.c's
format: a 1,024-byte header, then uint16 ids). Then n batches of B sequences of T at evenly spaced offsets.

usage: python3 gpt2_loss.py FOLDER CORPUS|SHARD_DIR B NBATCHES   (prints the loss)
"""
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    raw = open(path, 'rb').read()
    (n,) = struct.unpack('<Q', raw[:8])
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == '__metadata__':
            continue
        dtype = {'F32': np.float32, 'F16': np.float16}[t['dtype']]
        b, e = t['data_offsets']
        out[name] = np.frombuffer(body[b:e], dtype=dtype).reshape(t['shape']).astype(np.float64)
    return out


def held_out(data, chunk=8192, every=10):
    n = (len(data) + chunk - 1) // chunk
    held = [i for i in range(n) if i % every == every - 1]
    train = [i for i in range(n) if i % every != every - 1]
    if not held and n > 1:
        held = [train.pop()]
    if n <= 1:
        return data
    return b''.join(data[i * chunk:(i + 1) * chunk] for i in held)


def held_out_ids(corpus):
    """The held-out token ids: a text's held-out bytes, or a shard folder's held-out shard."""
    if not os.path.isdir(corpus):
        return np.frombuffer(held_out(open(corpus, 'rb').read()), dtype=np.uint8).astype(np.int64)
    index = json.load(open(os.path.join(corpus, 'index.json')))
    raw = open(os.path.join(corpus, index['heldOut']), 'rb').read()
    (count,) = struct.unpack('<i', raw[8:12])
    return np.frombuffer(raw[1024:1024 + 2 * count], dtype='<u2').astype(np.int64)


def eval_rows(held, B, T, nb):
    span = len(held) - T - 1
    total = B * nb
    rows = []
    for k in range(nb):
        batch = []
        for b in range(B):
            off = ((k * B + b) * span) // max(1, total - 1)
            batch.append(held[off:off + T + 1])
        rows.append(np.stack(batch))
    return rows


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def loss(folder, corpus, B, nb):
    cfg = json.load(open(f'{folder}/config.json'))
    st = read_safetensors(f'{folder}/model.safetensors')
    W = lambda n: st[n] if n in st else st[n.replace('transformer.', '', 1)]
    L, H, C = cfg['n_layer'], cfg['n_head'], cfg['n_embd']
    T, eps = cfg['n_positions'], cfg.get('layer_norm_epsilon', 1e-5)
    hs = C // H
    wte = W('transformer.wte.weight')
    losses = []
    for rows in eval_rows(held_out_ids(corpus), B, T, nb):
        x, y = rows[:, :T], rows[:, 1:]
        h = wte[x] + W('transformer.wpe.weight')[np.arange(T)]
        mask = np.triu(np.ones((T, T), dtype=bool), 1)
        for l in range(L):
            p = f'transformer.h.{l}.'
            a = layer_norm(h, W(p + 'ln_1.weight'), W(p + 'ln_1.bias'), eps)
            qkv = a @ W(p + 'attn.c_attn.weight') + W(p + 'attn.c_attn.bias')
            q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, H, hs).transpose(0, 2, 1, 3) for i in range(3))
            s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
            s = np.where(mask, -np.inf, s)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = (s @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
            h = h + o @ W(p + 'attn.c_proj.weight') + W(p + 'attn.c_proj.bias')
            m = layer_norm(h, W(p + 'ln_2.weight'), W(p + 'ln_2.bias'), eps)
            f = gelu_new(m @ W(p + 'mlp.c_fc.weight') + W(p + 'mlp.c_fc.bias'))
            h = h + f @ W(p + 'mlp.c_proj.weight') + W(p + 'mlp.c_proj.bias')
        h = layer_norm(h, W('transformer.ln_f.weight'), W('transformer.ln_f.bias'), eps)
        logits = h @ wte.T  # the tied head
        z = logits - logits.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        losses.append(-np.take_along_axis(logp, y[..., None], -1).mean())
    return float(np.mean(losses))


if __name__ == '__main__':
    print(loss(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
