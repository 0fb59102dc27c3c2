"""The compiled pieces of a training step: per-token log-probs (the π_old prefill and the training
forward), the gradient of one microbatch (RL objective or SFT cross-entropy), and the optimizer
update. The loop that strings them together lives in `rlx_trainer.trainer`.

Layout: a microbatch is n = b·G rows of S positions. Per-token arrays are [n, S] and aligned with
the tokens (entry t is about token t, predicted from tokens < t; entry 0 is always 0), so rows
shard over (data, fsdp) like any batch; the objective sees them reshaped to [b, G, S].

Aligned mode (DESIGN §6): the training forward is `jax.checkpoint(logprobs,
policy=nothing_saveable)` around the *whole* log-prob function, so XLA compiles its primal like
the plain jitted prefill that computes π_old and r = π_θ/π_old is exactly 1.0 on the first
update. Both go through the same Python function with the same shapes.

Fused π_old: when π_old is the params being differentiated (π_old = the params at the step's
start and the batch makes one update), `rl_grad_fused` takes log π_old as the stop-gradient of
the training forward's own log-probs: one forward instead of a prefill plus a remat forward
(with a reference model, whose π_ref still comes from a prefill, the remat stays), and r == 1
exactly by construction. It returns log π_old for the mismatch statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import optax

from rlx_model import ModelConfig, Params, token_logprobs
from rlx_trainer.objective import ObjectiveBatch, RLObjective

__all__ = ["StepFunctions"]

sg = jax.lax.stop_gradient
Arrays = dict[str, jax.Array]


def _shift(x: jax.Array) -> jax.Array:
    """[n, S] predictions of token t+1 at t -> entry t about token t (entry 0 = 0)."""
    return jnp.pad(x[:, :-1], ((0, 0), (1, 0)))


def _masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    return (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)


class StepFunctions:
    """Jitted functions for one model config, objective, optimizer and alignment mode."""

    def __init__(
        self,
        cfg: ModelConfig,
        objective: RLObjective | None,
        optimizer: optax.GradientTransformation,
        *,
        group: int,
        aligned: bool,
        chunk_size: int = 128,
        state_shardings: tuple[Any, Any] | None = None,
    ) -> None:
        """`state_shardings`: (params, optimizer state) shardings the updates' new state is laid
        out by (None: as XLA chooses)."""
        self.cfg = cfg
        self.objective = objective
        self.optimizer = optimizer
        self.group = group
        self.aligned = aligned
        self.chunk_size = chunk_size

        plain = partial(self._logprobs)
        self._train_logprobs: Callable[..., tuple[jax.Array, jax.Array]] = (
            jax.checkpoint(plain, policy=jax.checkpoint_policies.nothing_saveable)
            if aligned
            else plain
        )
        self.prefill = jax.jit(plain)
        self.rl_grad = jax.jit(
            jax.value_and_grad(self._rl_loss, has_aux=True), static_argnames=("max_len",)
        )
        # A stale batch (π_old another version's params) trains through the plain forward even
        # in aligned mode: its ratio is not 1 by design, so the remat (a second forward, 0.37x
        # of the floor at the Qwen2.5-0.5B shape) would buy only the last bits of the lag metrics.
        stale_loss = partial(self._rl_loss, aligned=False)
        self.rl_grad_stale = (
            jax.jit(jax.value_and_grad(stale_loss, has_aux=True), static_argnames=("max_len",))
            if aligned
            else self.rl_grad
        )
        self.rl_grad_fused = jax.jit(
            jax.value_and_grad(self._rl_loss_fused, has_aux=True), static_argnames=("max_len",)
        )
        self.sft_grad = jax.jit(jax.value_and_grad(self._sft_loss, has_aux=True))
        # Buffers are donated so that outputs reuse them instead of fresh memory (on a CPU, a
        # fresh multi-GiB output costs page faults: at the Qwen2.5-0.5B shape in f32 the update
        # took 4.5 s with nothing donated, 1.4 s with params and state donated). Gradients are
        # dead once added or applied. The state a step starts from is not donated (a step is
        # adopted only after its push succeeds, and a failed one leaves it as it was): the
        # update writes into `spare` instead, an older state nothing reads any more (the trainer
        # passes the one before the current), an argument the function never reads
        # (`keep_unused`, or jit would drop it and its donation with it): `apply`'s is an
        # optimizer state (its new params reuse the gradients'), the one-jit updates' a
        # (params, optimizer state) pair. A buffer something else still views (a host copy of a
        # kept version is a numpy view on a CPU) is not donated: jax copies it instead.
        self.add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b), donate_argnums=(0,))
        state = (None, None) if state_shardings is None else state_shardings
        self.apply = jax.jit(
            self._apply,
            donate_argnums=(2, 4),
            keep_unused=True,
            out_shardings=(*state, None),
        )  # (params, opt_state, grads, scale, spare optimizer state or None)

        # One update from one microbatch, its gradient and AdamW in one jit (epochs =
        # minibatches = grad_accum = 1, every step of the default config): the gradients never
        # leave it. Bit-identical to the gradient function followed by `apply`.
        def one_jit(loss: Callable[..., Any], static: tuple[str, ...] = ("max_len",)) -> Any:
            return jax.jit(
                partial(self._update, loss),
                static_argnames=static,
                donate_argnames=("spare",),
                keep_unused=True,
                out_shardings=(*state, None, None),
            )

        self.rl_update = one_jit(self._rl_loss)
        self.rl_update_stale = one_jit(stale_loss) if aligned else self.rl_update
        self.rl_update_fused = one_jit(self._rl_loss_fused)
        self.sft_update = one_jit(self._sft_loss, static=())

    def _logprobs(self, params: Params, mb: Arrays) -> tuple[jax.Array, jax.Array]:
        """log π(token t | tokens < t) and the entropy of that distribution, [n, S] each."""
        targets = jnp.roll(mb["tokens"], -1, axis=1)
        logp, entropy = token_logprobs(
            params,
            self.cfg,
            mb["tokens"],
            targets,
            mb["positions"],
            valid=mb["valid"],
            chunk_size=self.chunk_size,
        )
        return _shift(logp), _shift(entropy)

    def _grouped(self, x: jax.Array) -> jax.Array:
        n = x.shape[0]
        return x.reshape(n // self.group, self.group, *x.shape[1:])

    def _rl_loss(
        self,
        params: Params,
        mb: Arrays,
        old_logp: jax.Array,
        ref_logp: jax.Array | None,
        *,
        max_len: int | None,
        aligned: bool = True,
    ) -> tuple[jax.Array, tuple[Arrays, jax.Array]]:
        """The RL loss; its aux is (metrics, the training forward's log π_θ, stop-gradient):
        on a step's first update π_θ is the params the step starts from, which the trainer
        compares with the generating version's (the policy lag). `aligned` False: the plain
        forward, whatever the mode (a stale batch)."""
        forward = self._train_logprobs if aligned else self._logprobs
        logp, entropy = forward(params, mb)
        loss, metrics = self._rl_terms(logp, entropy, mb, old_logp, ref_logp, max_len)
        return loss, (metrics, sg(logp))

    def _rl_loss_fused(
        self, params: Params, mb: Arrays, ref_logp: jax.Array | None, *, max_len: int | None
    ) -> tuple[jax.Array, tuple[Arrays, jax.Array]]:
        """The RL loss with log π_old = sg(log π_θ) of this very forward (see the module doc).
        With a reference model the forward stays the aligned one, so it matches π_ref's
        prefill (KL exactly 0 while π_θ is π_ref)."""
        forward = self._logprobs if ref_logp is None else self._train_logprobs
        logp, entropy = forward(params, mb)
        old_logp = sg(logp)
        loss, metrics = self._rl_terms(logp, entropy, mb, old_logp, ref_logp, max_len)
        return loss, (metrics, old_logp)

    def _rl_terms(
        self,
        logp: jax.Array,
        entropy: jax.Array,
        mb: Arrays,
        old_logp: jax.Array,
        ref_logp: jax.Array | None,
        max_len: int | None,
    ) -> tuple[jax.Array, Arrays]:
        """The objective and its metrics from the training forward's [n, S] log-probs."""
        assert self.objective is not None
        mask = mb["loss_mask"]
        batch = ObjectiveBatch(
            old_logp=self._grouped(old_logp),
            sampler_logp=self._grouped(mb["sampler_logp"]),
            ref_logp=None if ref_logp is None else self._grouped(ref_logp),
            mask=self._grouped(mask),
            rewards=mb["rewards"].reshape(-1, self.group),
            max_len=max_len,
        )
        loss, metrics = self.objective(self._grouped(logp), batch)
        ratio = jnp.exp(sg(logp) - old_logp)
        on = mask > 0
        metrics = dict(metrics)
        metrics["ratio_min"] = jnp.min(jnp.where(on, ratio, jnp.inf))
        metrics["ratio_max_abs_dev"] = jnp.max(jnp.where(on, jnp.abs(ratio - 1.0), 0.0))
        metrics["entropy"] = _masked_mean(sg(entropy), mask)
        if ref_logp is None:  # KL against π_old when there is no reference model
            log_rho = old_logp - sg(logp)
            metrics["kl_k1"] = _masked_mean(-log_rho, mask)
            metrics["kl_k3"] = _masked_mean(jnp.exp(log_rho) - log_rho - 1.0, mask)
        return loss, metrics

    def _sft_loss(
        self, params: Params, mb: Arrays, denominator: jax.Array
    ) -> tuple[jax.Array, Arrays]:
        """Σ −log π(token) over the mask / `denominator` (the minibatch's masked tokens), so
        summing microbatch gradients gives the token-mean over the whole minibatch."""
        logp, entropy = self._train_logprobs(params, mb)
        mask = mb["loss_mask"]
        loss = -(logp * mask).sum() / denominator
        return loss, {"loss": loss, "entropy": _masked_mean(sg(entropy), mask)}

    def _apply(
        self, params: Params, opt_state: Any, grads: Params, scale: jax.Array, spare: Any = None
    ) -> tuple[Params, Any, jax.Array]:
        """The new params and optimizer state from the gradients × `scale`, and their norm.
        `spare` is unread: its buffers, donated, hold the outputs."""
        grads = jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads)
        norm = optax.tree.norm(grads)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, norm

    def _update(
        self,
        loss: Callable[..., tuple[jax.Array, Any]],
        params: Params,
        opt_state: Any,
        scale: jax.Array,
        spare: Any,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[Params, Any, jax.Array, Any]:
        """`_apply` of the gradient of `loss(params, *args, **kwargs)`, and the loss's aux."""
        (_, aux), grads = jax.value_and_grad(loss, has_aux=True)(params, *args, **kwargs)
        new_params, new_state, norm = self._apply(params, opt_state, grads, scale)
        return new_params, new_state, norm, aux
