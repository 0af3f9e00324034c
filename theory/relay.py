"""The linear relay model, derived from its recursion and checked by sympy.

docs/definitions.md#bound: uniform causal averaging, identity values, unit offsets on the ``P``
prompt positions. With ``n = P + t`` the absolute position of continuation token ``t``,

    delta_l(n) = a delta_{l-1}(n) + (1/n) (P D_{l-1} + sum_{P < j <= n} delta_{l-1}(j)),
    delta_0 = 0,  D_0 = 1,  a = 0 (no residual) or 1 (residual).

Steps (each asserts what it claims, then prints it):

1. ``delta_l = (P/n) e_l`` with ``e_1 = 1``, ``e_{l+1}(n) = 1 + sum_{j=P+1..n} e_l(j)/j``.
2. Generating function: ``sum_L e_L(n) z^(L-1) = G_n(z) / (1 - z)`` with
   ``G_n(z) = prod_{j=P+1..n} 1/(1 - z/j) = Gamma(n+1) Gamma(P+1-z) / (Gamma(P+1) Gamma(n+1-z))``,
   whose coefficients are the complete homogeneous symmetric polynomials
   ``h_k(1/(P+1), ..., 1/n)``; so ``e_L = sum_{k<L} h_k``.
3. Harmonic form: ``log G_n = sum_i p_i z^i / i`` with ``p_i = H_n^(i) - H_P^(i)``
   (``= psi(n+1) - psi(P+1)`` for ``i = 1``, ``zeta(i, P+1) - zeta(i, n+1)`` above), and
   Newton's identities ``k h_k = sum_i p_i h_{k-i}``.
4. Residual: ``D_l = 2^l`` and ``delta_L = sum_{j=1..L} C(L, j) delta_j^(no residual)``.
5. Depth limit: ``G_n(1) = n/P``, so ``delta_L(n) = Pr[N_n < L]`` for a sum ``N_n`` of
   independent geometric counts of mean ``H_{n-1} - H_{P-1}``.
6. Asymptotics: ``G_n(z) = n^z Gamma(P+1-z)/Gamma(P+1) (1 + O(1/n))``, so ``e_L(n)`` is a
   polynomial in ``log n`` up to ``O((log n)^(L-1) / n)``, led by ``(log n)^(L-1)/(L-1)!``.
7. Local exponent ``alpha = -d log delta / d log t -> 1``, with
   ``1 - alpha = (L-1)/log t - (L-1)(1 + gamma - H_P)/(log t)^2 + O((log t)^-3)``.

Run as ``python -m nohair_jax.theory.relay`` or ``python theory/relay.py``; the library
(``nohair_jax.relay``) evaluates these formulas numerically and its tests hold them against
the functions here.
"""

from __future__ import annotations

import itertools
import math

import sympy as sp

P, n, t, z = sp.symbols("P n t z", positive=True)
u, w = sp.symbols("u w", positive=True)  # u = log t, w = 1/u
# Layer generating variables and the relay operator (A f)(n) = (1/n) sum_{P<j<=n} f(j) acting
# on the source g(n) = P/n: every layer is a polynomial in the one operator A, so A commutes
# with everything that appears and may be treated as a symbol.
x, y, A, g = sp.symbols("x y A g")
# Rational functions of P, for the checks at symbolic P: exact and much faster than cancel().
FIELD, P_FIELD = sp.field(P, sp.QQ)

MAX_DEPTH = 4  # depths checked symbolically
SPAN = 4  # continuation positions n = P+1..P+SPAN checked with P symbolic


def power_sum(i):
    """Symbol ``p_i = sum_{j=P+1..n} j^-i``."""
    return sp.Symbol(f"p{i}")


def prompt_constant(i):
    """Symbol ``c_i``: ``c_1 = gamma - H_P``, ``c_i = zeta(i, P+1)``, the ``n``-free part of ``p_i``."""
    return sp.Symbol(f"c{i}")


def recursion_offsets(span, depth, residual=False):
    """``delta_l(P+m)`` for ``l = 0..depth``, ``m = 1..span``, straight from the recursion.

    Exact rational functions of ``P``, as elements of the field ``QQ(P)`` (fast exact
    arithmetic; ``.as_expr()`` gives the sympy expression). A list of ``depth + 1`` lists.
    """
    a = 1 if residual else 0
    rows = [[FIELD.zero] * span]
    prompt = FIELD.one
    for _ in range(depth):
        prev = rows[-1]
        rows.append([a * prev[m] + (P_FIELD * prompt + sum(prev[: m + 1])) / (P_FIELD + m + 1)
                     for m in range(span)])
        prompt *= 1 + a
    return rows


def newton_complete_homogeneous(power_sums):
    """``[h_0..h_K]`` from ``[p_1..p_K]`` by Newton's identities ``k h_k = sum_i p_i h_{k-i}``."""
    h = [sp.Integer(1)]
    for k in range(1, len(power_sums) + 1):
        h.append(sp.expand(sum(power_sums[i - 1] * h[k - i] for i in range(1, k + 1)) / k))
    return h


def weights(depth, residual=False):
    """``W_k`` (``k < depth``) with ``delta_depth = (P/n) sum_k W_k h_k``: 1, or ``sum_{j>k} C(L, j)``."""
    if not residual:
        return [sp.Integer(1)] * depth
    return [sp.Integer(sum(math.comb(depth, j) for j in range(k + 1, depth + 1))) for k in range(depth)]


def harmonic_power_sum(i):
    """``p_i`` as a special function of real ``n`` and ``P`` (digamma for ``i = 1``, Hurwitz zeta above)."""
    if i == 1:
        return sp.polygamma(0, n + 1) - sp.polygamma(0, P + 1)
    return sp.zeta(i, P + 1) - sp.zeta(i, n + 1)


def closed_form(depth, residual=False):
    """``delta_depth(n)`` as an expression in ``P``, ``n`` (digamma, Hurwitz zeta), ``n = P + t``."""
    h = newton_complete_homogeneous([harmonic_power_sum(i) for i in range(1, depth)])
    return P / n * sum((wk * hk for wk, hk in zip(weights(depth, residual), h)), sp.Integer(0))


def asymptotic_polynomial(depth, residual=False):
    """``E(u)`` with ``delta_depth(t) = (P/t) E(log t) (1 + O(P/t))``, a polynomial in ``u, c_i``."""
    f = newton_complete_homogeneous([prompt_constant(i) for i in range(1, depth)])
    wk = weights(depth, residual)
    return sp.expand(sum(u**m / sp.factorial(m) * sum(wk[k] * f[k - m] for k in range(m, depth))
                         for m in range(depth)))


def prompt_constants(prompt_len, depth):
    """Substitution ``{c_i: value}`` for a given ``P``: ``c_1 = EulerGamma - H_P``, ``c_i = zeta(i, P+1)``."""
    values = {prompt_constant(1): sp.EulerGamma - sp.harmonic(prompt_len)}
    values.update({prompt_constant(i): sp.zeta(i, prompt_len + 1) for i in range(2, depth)})
    return values


def local_exponent_series(depth, terms=3, residual=False):
    """``1 - alpha`` as a series in ``w = 1/log t`` through ``w^terms`` (polynomial in ``w, c_i``).

    For ``delta = (P/t) E(log t)``, ``1 - alpha = E'(u)/E(u)``; with ``u = 1/w`` this is ``w``
    times a ratio of polynomials in ``w`` (the coefficients of ``E'`` and ``E`` from the top),
    expanded by power-series division.
    """
    e = sp.Poly(asymptotic_polynomial(depth, residual), u)
    den = e.all_coeffs()  # u^(L-1), ..., u^0: E(1/w) = w^-(L-1) sum_k den[k] w^k
    num = e.diff(u).all_coeffs()  # E'(1/w) = w^-(L-2) sum_k num[k] w^k (num = [0] when L = 1)
    q = []
    for k in range(terms):
        known = sum(den[j] * q[k - j] for j in range(1, min(k, len(den) - 1) + 1))
        q.append(sp.expand(((num[k] if k < len(num) else 0) - known) / den[0]))
    return sp.expand(sum(qk * w ** (k + 1) for k, qk in enumerate(q)))


def _zero(expr):
    """Exact zero test: rational functions by cancellation, special functions by simplify."""
    expr = sp.cancel(sp.together(expr))
    return expr == 0 or sp.simplify(expr) == 0


def _say(verbose, *lines):
    if verbose:
        print(*lines, sep="\n")


def step_e_recursion(verbose=True):
    """Step 1: ``delta_l = (P/n) e_l`` turns the relay recursion into the ``e`` recursion."""
    delta = recursion_offsets(SPAN, MAX_DEPTH)
    e = [[FIELD.one] * SPAN]
    for _ in range(MAX_DEPTH - 1):
        prev = e[-1]
        e.append([1 + sum(prev[j] / (P_FIELD + j + 1) for j in range(m + 1)) for m in range(SPAN)])
    for l in range(1, MAX_DEPTH + 1):
        for m in range(SPAN):
            assert delta[l][m] == P_FIELD / (P_FIELD + m + 1) * e[l - 1][m]
    _say(verbose, "1. delta_l(n) = (P/n) e_l(n), e_1 = 1, e_{l+1}(n) = 1 + sum_{j=P+1..n} e_l(j)/j",
         f"   checked with P symbolic for l <= {MAX_DEPTH}, n = P+1..P+{SPAN}; e.g. delta_2(P+2) = "
         f"{sp.factor(delta[2][1].as_expr())}")
    return e


def step_generating_function(e, verbose=True):
    """Step 2: the generating function in ``z`` and the complete homogeneous polynomials."""
    j = sp.Symbol("j", positive=True, integer=True)
    gamma_form = sp.gamma(n + 1) * sp.gamma(P + 1 - z) / (sp.gamma(P + 1) * sp.gamma(n + 1 - z))
    # The product is characterised by G_P = 1 and G_n / G_{n-1} = 1/(1 - z/n) = n/(n - z).
    assert _zero(gamma_form.subs(n, P) - 1)
    assert _zero(sp.gammasimp(gamma_form / gamma_form.subs(n, n - 1) - n / (n - z)))
    # Hence G_n - G_{n-1} = (z/n) G_n: [z^k] gives h_k(..n) - h_k(..n-1) = h_{k-1}(..n)/n (the
    # monomials whose largest index is n), and E_n = G_n/(1-z) obeys the same difference
    # equation with E_P = 1/(1-z): its coefficients e_L(n) satisfy e_L(n) - e_L(n-1) = e_{L-1}(n)/n,
    # e_L(P) = 1, e_1 = G_n(0) = 1, which is the e recursion summed.
    assert _zero(sp.gammasimp(gamma_form - gamma_form.subs(n, n - 1) - z / n * gamma_form))
    assert gamma_form.subs(z, 0) == 1
    # Independent check at P symbolic: the z-coefficients of the finite product (a product of
    # geometric series, truncated) against the recursion, and against h_k as a sum over multisets.
    for m in range(1, SPAN + 1):
        nodes = [1 / (P_FIELD + i) for i in range(1, m + 1)]
        h = [FIELD.one] + [FIELD.zero] * (MAX_DEPTH - 1)
        for v in nodes:  # multiply by 1/(1 - z v) = sum_k (v z)^k
            h = [sum(h[k - r] * v**r for r in range(k + 1)) for k in range(MAX_DEPTH)]
        for L in range(1, MAX_DEPTH + 1):
            assert sum(h[:L]) == e[L - 1][m - 1]
            assert sum(sp.prod(c) for c in itertools.combinations_with_replacement(nodes, L - 1)) == h[L - 1]
    product = sp.Product(1 / (1 - z / j), (j, P + 1, n))
    _say(verbose, "2. sum_L e_L(n) z^(L-1) = G_n(z)/(1 - z),",
         f"   G_n(z) = {sp.sstr(product)} = {sp.sstr(gamma_form)}",
         "   so e_L(n) = sum_{k<L} h_k(1/(P+1), ..., 1/n)  (complete homogeneous symmetric polynomials)",
         f"   checked: G_P = 1, G_n/G_(n-1) = n/(n-z); coefficients vs recursion and multisets, n <= P+{SPAN}")
    return gamma_form


def step_harmonic_form(gamma_form, verbose=True):
    """Step 3: power sums as harmonic differences (digamma, Hurwitz zeta) and Newton's identities."""
    order = MAX_DEPTH
    log_g = sp.series(sp.log(gamma_form).expand(force=True), z, 0, order).removeO()
    for i in range(1, order):
        coefficient = i * log_g.coeff(z, i)
        assert _zero((coefficient - harmonic_power_sum(i)).rewrite(sp.zeta))
        for prompt_len, pos in [(3, 7), (5, 6)]:  # = H_n^(i) - H_P^(i) at integers
            assert _zero(harmonic_power_sum(i).subs({P: prompt_len, n: pos})
                         - (sp.harmonic(pos, i) - sp.harmonic(prompt_len, i)))
    # exp(sum p_i z^i / i) expanded in z gives Newton's identities' h_k.
    p = [power_sum(i) for i in range(1, order)]
    exponent = sum(p[i - 1] * z**i / i for i in range(1, order))
    exp_series = sp.expand(sum(exponent**k / sp.factorial(k) for k in range(order)))  # exponent = O(z)
    h = newton_complete_homogeneous(p)
    for k in range(order):
        assert _zero(exp_series.coeff(z, k) - h[k])
    e_closed = [sp.expand(sum(h[:L])) for L in range(1, MAX_DEPTH + 1)]
    # The harmonic form against the recursion, in exact rationals at P = 3.
    prompt_len, span = 3, 8
    exact = recursion_offsets(span, MAX_DEPTH)
    for L in range(1, MAX_DEPTH + 1):
        for m in range(span):
            pos = prompt_len + m + 1
            values = {p[i - 1]: sp.harmonic(pos, i) - sp.harmonic(prompt_len, i) for i in range(1, order)}
            closed = sp.Rational(prompt_len, pos) * e_closed[L - 1].subs(values)
            assert exact[L][m].as_expr().subs(P, prompt_len) == closed
    _say(verbose, "3. log G_n(z) = sum_i p_i z^i / i,  p_i = H_n^(i) - H_P^(i):",
         *(f"   p{i} = {sp.sstr(harmonic_power_sum(i))}" for i in range(1, order)),
         "   Newton: k h_k = sum_i p_i h_(k-i);  e_L = sum_{k<L} h_k:",
         *(f"   e_{L} = {sp.sstr(e_closed[L - 1])}" for L in range(1, MAX_DEPTH + 1)),
         "   checked: z-series of log Gamma, H at integers, exact rationals at "
         f"P = {prompt_len}, n <= {prompt_len + span}")
    return e_closed


def step_residual(verbose=True):
    """Step 4: with residual, ``D_l = 2^l`` and a binomial sum of the no-residual layers."""
    # A prompt position i reads only prompt positions, each carrying D: D + (1/i) * i * D = 2D.
    D, i, j = sp.symbols("D i j", positive=True, integer=True)
    assert _zero(D + sp.Sum(D, (j, 1, i)).doit() / i - 2 * D)
    # Layer generating functions: no residual delta_L = A delta_{L-1} + g, residual
    # delta_L = (1 + A) delta_{L-1} + 2^(L-1) g, both from delta_0 = 0.
    plain = y * g / ((1 - y) * (1 - y * A))
    res = x * g / ((1 - 2 * x) * (1 - x * (1 + A)))
    assert _zero(plain - y * (A * plain + g / (1 - y)))
    assert _zero(res - x * ((1 + A) * res + g / (1 - 2 * x)))
    # Binomial transform: sum_L x^L sum_j C(L,j) a_j = (1/(1-x)) a(x/(1-x)).
    assert _zero(res - plain.subs(y, x / (1 - x)) / (1 - x))
    # Coefficient of A^k g in delta_L: W_k = sum_{j>k} C(L, j), and A^k g = (P/n) h_k (step 2).
    res_series = sp.series(res, x, 0, MAX_DEPTH + 1).removeO()
    for L in range(1, MAX_DEPTH + 1):
        layer = sp.expand(res_series.coeff(x, L))
        assert all(layer.coeff(A, k).coeff(g) == wk for k, wk in enumerate(weights(L, residual=True)))
    plain_rows = recursion_offsets(SPAN, MAX_DEPTH)
    res_rows = recursion_offsets(SPAN, MAX_DEPTH, residual=True)
    for L in range(1, MAX_DEPTH + 1):
        for m in range(SPAN):
            assert res_rows[L][m] == sum(math.comb(L, j) * plain_rows[j][m] for j in range(1, L + 1))
    # The special-function closed form (both models) at integers, against the recursion at P = 3.
    exact = {False: plain_rows, True: res_rows}
    for residual, rows in exact.items():
        for L in range(1, MAX_DEPTH + 1):
            expr = closed_form(L, residual).subs(P, 3)
            for m in range(SPAN):
                value = sp.expand(expr.subs(n, 4 + m))  # psi and zeta at integers: rationals
                assert value == rows[L][m].as_expr().subs(P, 3)
    _say(verbose, "4. residual: D_l = 2^l; sum_L x^L delta_L = " + sp.sstr(res)
         + " = (1/(1-x)) Y(x/(1-x)),  Y(y) = " + sp.sstr(plain),
         "   so delta_L = sum_{j=1..L} C(L, j) delta_j^(no residual) = (P/n) sum_{k<L} h_k sum_{j>k} C(L, j)",
         "   weights W_k: " + "; ".join(f"L={L}: {weights(L, True)}" for L in range(1, MAX_DEPTH + 1)),
         f"   checked against the residual recursion with P symbolic, n <= P+{SPAN}; closed forms at P = 3")


def step_depth_limit(gamma_form, verbose=True):
    """Step 5: ``sum_k h_k = n/P``: the offset is a probability, ~1 until ``log(n/P) ~ L``."""
    assert _zero(sp.gammasimp(gamma_form.subs(z, 1)) - n / P)
    mean = sp.diff(sp.log(gamma_form).expand(force=True), z).subs(z, 1)
    assert _zero((mean - (sp.harmonic(n - 1) - sp.harmonic(P - 1))).rewrite(sp.polygamma))
    _say(verbose, "5. G_n(1) = n/P: (P/n) G_n(z) = prod_j (1 - 1/j)/(1 - z/j) is the pgf of N_n, a sum of",
         "   independent geometric counts (ratio 1/j), mean H_(n-1) - H_(P-1) ~ log(n/P); hence",
         "   delta_L(n) = Pr[N_n < L] <= 1: the offset stays near 1 until log(t/P) exceeds L (t >> P e^L)")


def step_asymptotics(e_closed, verbose=True):
    """Step 6: ``G_n(z) ~ n^z F(z)`` and the log-polynomial expansion of ``e_L``."""
    big = sp.Symbol("N", positive=True)
    tail = sp.series(sp.loggamma(big + 1) - sp.loggamma(big + 1 - z) - z * sp.log(big), big, sp.oo, 2).removeO()
    assert _zero(tail - z * (1 - z) / (2 * big))  # so Gamma(n+1)/Gamma(n+1-z) = n^z (1 + O(1/n))
    f_log = sp.series(sp.loggamma(P + 1 - z) - sp.loggamma(P + 1), z, 0, MAX_DEPTH).removeO()
    for i in range(1, MAX_DEPTH):
        value = (sp.EulerGamma - sp.harmonic(P)) if i == 1 else sp.zeta(i, P + 1)
        assert _zero((i * f_log.coeff(z, i) - value).rewrite(sp.zeta).rewrite(sp.polygamma))
    # n -> oo: p_1 = log n + c_1 + o(1), p_i = c_i + o(1) (i >= 2).
    c_1 = (sp.EulerGamma - sp.harmonic(P)).rewrite(sp.polygamma)
    assert _zero(sp.limit(harmonic_power_sum(1) - sp.log(n), n, sp.oo) - c_1)
    assert all(sp.limit(sp.zeta(i, n + 1), n, sp.oo) == 0 for i in range(2, MAX_DEPTH))
    limits = {power_sum(i): prompt_constant(i) for i in range(2, MAX_DEPTH)}
    limits[power_sum(1)] = u + prompt_constant(1)
    polys = [asymptotic_polynomial(L) for L in range(1, MAX_DEPTH + 1)]
    for L in range(1, MAX_DEPTH + 1):
        # e_L is a polynomial in p_i, so its limit form is the closed form at the limit values;
        # the leading term is p_1^(L-1)/(L-1)!, i.e. (log n)^(L-1)/(L-1)!.
        assert _zero(e_closed[L - 1].subs(limits) - polys[L - 1])
        leading = sp.Poly(e_closed[L - 1], power_sum(1))
        assert leading.degree() == L - 1 and leading.LC() == 1 / sp.factorial(L - 1)
        assert polys[L - 1].coeff(u, L - 1) == 1 / sp.factorial(L - 1)
    tail_n = sp.sstr(sp.factor(sp.simplify(tail.subs(big, n))))
    _say(verbose, f"6. log Gamma(n+1) - log Gamma(n+1-z) - z log n = {tail_n} + O(n^-2), so",
         "   e_L(n) = [z^(L-1)] n^z F(z)/(1-z) + O((log n)^(L-1)/n),  log F(z) = sum c_i z^i/i,"
         " c1 = EulerGamma - H_P, ci = zeta(i, P+1), u = log n:",
         *(f"   e_{L} ~ {sp.sstr(sp.collect(poly, u))}" for L, poly in enumerate(polys, start=1)),
         "   the closed form at p1 -> u + c1, pi -> ci; leading (log n)^(L-1)/(L-1)!, so lim e_L / that = 1")
    return polys


def step_local_exponent(verbose=True):
    """Step 7: ``alpha(t) -> 1`` and its ``1/log t`` expansion."""
    # alpha = t/n - t e_L'(n)/e_L(n) with e_L'(n) = sum_i (d e_L / d p_i) p_i'(n) and
    # p_i'(n) = i zeta(i+1, n+1) (d psi = zeta(2, .), d zeta(s, q)/dq = -s zeta(s+1, q)).
    for i in range(1, MAX_DEPTH):
        slope = (-1) ** (i + 1) * sp.polygamma(i, n + 1) / sp.factorial(i - 1)  # = i zeta(i+1, n+1)
        assert _zero((sp.diff(harmonic_power_sum(i), n) - slope).rewrite(sp.zeta))
        assert _zero((slope - i * sp.zeta(i + 1, n + 1)).rewrite(sp.zeta))
        assert sp.limit(t * slope.subs(n, P + t), t, sp.oo) == (1 if i == 1 else 0)
    assert sp.limit(t / (P + t), t, sp.oo) == 1
    p = [power_sum(i) for i in range(1, MAX_DEPTH)]
    for L in range(2, MAX_DEPTH + 1):
        e = sum(newton_complete_homogeneous(p[: L - 1]))
        # p_1 -> oo while p_i (i >= 2) stay bounded: each (d e/d p_i) / e -> 0.
        for i in range(1, L):
            assert sp.limit(sp.diff(e, p[i - 1]) / e, p[0], sp.oo) == 0
    series = [local_exponent_series(L) for L in range(1, MAX_DEPTH + 1)]
    for L in range(1, MAX_DEPTH + 1):
        assert series[L - 1].coeff(w, 1) == L - 1
        assert _zero(series[L - 1].coeff(w, 2) + (L - 1) * (1 + prompt_constant(1)))
    _say(verbose, "7. alpha(t) = t/n - t e_L'(n)/e_L(n) -> 1,  e_L'(n) = sum_i (d e_L/d p_i) i zeta(i+1, n+1):",
         "   t/n -> 1, t p_1'(n) -> 1, t p_i'(n) -> 0 (i >= 2), (d e_L/d p_i)/e_L -> 0 as p_1 -> oo",
         "   1 - alpha = E'(u)/E(u) + O(P/t), u = log t, w = 1/u; to second order (L-1)/(u + 1 + c1):",
         *(f"   L={L}: 1 - alpha = {sp.sstr(sp.collect(s, w))} + O(w^4)" for L, s in enumerate(series, start=1)))
    return series


def derive(verbose=True):
    """Run every step (each asserts its claims); return the derived expressions by name."""
    e = step_e_recursion(verbose)
    gamma_form = step_generating_function(e, verbose)
    e_closed = step_harmonic_form(gamma_form, verbose)
    step_residual(verbose)
    step_depth_limit(gamma_form, verbose)
    polys = step_asymptotics(e_closed, verbose)
    series = step_local_exponent(verbose)
    return {"generating_function": gamma_form, "e_closed": e_closed, "asymptotic": polys,
            "local_exponent": series}


def main():
    derive(verbose=True)
    print("all checks passed")


if __name__ == "__main__":
    main()
