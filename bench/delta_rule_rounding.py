"""The chunked gated delta rule's error from where it rounds, modelled in numpy on the CPU:
the algorithm of model/cuda_delta_net.h with the rounding points of pass 1 in TF32 (operands
rounded to TF32, the system's blocks solved on TF32 products), of pass 1 on bf16 products
(q, k, v and the right-hand side rounded once to bf16, the blocked substitution's operands
bf16), the same with q, k, v rounded before (bf16-in: the convolution writes them in bf16,
the right-hand side is rounded again), and of flash-linear-attention's
chunk_gated_delta_rule (bf16 inputs and gram, the chunk's full inverse rounded to bf16, W
and U' as one bf16 product each); pass 2 in bf16 for all four (bf16 W, U', Q, K, P and
state operand, fp32 state). Each against the fp64
per-token recurrence, on inputs drawn as CudaDeltaRuleTest draws them (one 200-token
document; mild, no and strong decays). Prints the relative error of each. The model is not
the kernels: it predicts what a rounding choice costs before a GPU is at hand (it gave
2.6e-3 for the TF32 pass 1, whose kernel measures 2.5e-3).
"""

import numpy as np


def round_bits(x, drop):
    """x (fp32) rounded to nearest, ties to even, keeping 32 - drop bits."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    half = (1 << (drop - 1)) - 1
    bits = ((bits + half + ((bits >> drop) & 1)) >> drop) << drop
    return bits.astype(np.uint32).view(np.float32)


def bf16(x):
    return round_bits(x, 16)


def tf32(x):
    return round_bits(x, 13)


def recurrence(q, k, v, g, beta):
    state = np.zeros((k.shape[1], v.shape[1]))
    out = np.zeros((k.shape[0], v.shape[1]))
    for t in range(k.shape[0]):
        state *= np.exp(g[t])
        u = beta[t] * (v[t] - state.T @ k[t])
        state += np.outer(k[t], u)
        out[t] = state.T @ q[t]
    return out


def pass1(q, k, v, big_g, b, mode):
    """W, U' and P of one chunk, rounded as `mode` rounds them."""
    f = np.float32
    dk, n = k.shape[1], k.shape[0]
    decay = np.exp(big_g[:, None] - big_g[None, :])
    if mode == "fla":
        qb, kb = bf16(q), bf16(k)
        a = np.tril(b[:, None] * decay * (kb @ kb.T), -1)
        inverse = bf16(np.linalg.inv(np.eye(n) + a).astype(f))
        rhs_k = bf16((b * np.exp(big_g))[:, None] * kb)
        rhs_v = bf16(b[:, None] * bf16(v))
        x = np.concatenate([bf16(inverse @ rhs_k), bf16(inverse @ rhs_v)], 1)
        return x[:, :dk], x[:, dk:], np.tril(decay * (qb @ kb.T)).astype(f)
    rnd = tf32 if mode == "tf32" else bf16
    qr, kr = rnd(q), rnd(k)
    # bf16-in: q, k and v arrive rounded (the convolution writes them in bf16), so the
    # right-hand side is rounded twice.
    k_in, v_in = (kr, bf16(v)) if mode == "bf16-in" else (k, v)
    a = np.tril(b[:, None] * decay * (kr @ kr.T), -1).astype(f)
    p = np.tril(decay * (qr @ kr.T)).astype(f)
    rhs = np.concatenate([(b * np.exp(big_g))[:, None] * k_in, b[:, None] * v_in], 1).astype(f)
    rhs = rnd(rhs)
    x = np.zeros_like(rhs)
    for i in range(0, n, 16):
        e = min(i + 16, n)
        diagonal = np.linalg.inv(np.eye(e - i) + a[i:e, i:e].astype(np.float64)).astype(f)
        acc = rnd(a[i:e, :i]) @ x[:i] if i else 0
        x[i:e] = rnd(rnd(diagonal) @ rnd(rhs[i:e] - acc))
    return x[:, :dk], x[:, dk:], p


def chunked(q, k, v, g, beta, mode, chunk=64):
    f = np.float32
    state = np.zeros((k.shape[1], v.shape[1]), f)
    out = np.zeros((k.shape[0], v.shape[1]))
    for c0 in range(0, k.shape[0], chunk):
        rows = slice(c0, min(c0 + chunk, k.shape[0]))
        big_g = np.cumsum(g[rows]).astype(f)
        w, u1, p = pass1(q[rows].astype(f), k[rows].astype(f), v[rows].astype(f), big_g,
                         beta[rows].astype(f), mode)
        qb, kb, s = bf16(q[rows]), bf16(k[rows]), bf16(state)
        u = bf16(bf16(u1) - bf16(w) @ s)
        out[rows] = np.exp(big_g)[:, None] * (qb @ s) + bf16(p) @ u
        state = np.exp(big_g[-1]) * state + kb.T @ bf16(np.exp(big_g[-1] - big_g)[:, None] * u)
    return out


def main():
    rng = np.random.default_rng(17)
    for dk, dv in [(128, 128), (16, 8)]:
        t = 200
        x = rng.random((t, 2 * dk + dv)) - 0.5
        q, k, v = x[:, :dk], x[:, dk:2 * dk], x[:, 2 * dk:]
        q = q / np.sqrt((q**2).sum(1, keepdims=True) + 1e-6) / np.sqrt(dk)
        k = k / np.sqrt((k**2).sum(1, keepdims=True) + 1e-6)
        u = rng.random(t)
        g = np.where(u < 0.1, 0.0, np.where(u > 0.95, -8 * rng.random(t), -0.3 * rng.random(t)))
        beta = rng.random(t)
        want = recurrence(q, k, v, g, beta)
        for mode in ("tf32", "bf16", "bf16-in", "fla"):
            got = chunked(q, k, v, g, beta, mode)
            err = np.linalg.norm(got - want) / np.linalg.norm(want)
            print(f"dk={dk} dv={dv} pass1={mode} relative_error={err:.3e}")


if __name__ == "__main__":
    main()
