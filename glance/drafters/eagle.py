"""The EAGLE-style head as a tree drafter: it grows an EAGLE-2/3-style dynamic
tree, one head pass per depth (see :mod:`glance.heads.eagle`).
"""

from __future__ import annotations

import numpy as np
import torch

from glance.core.tree import CandidateTree
from glance.drafters.protocol import GrowingDrafter
from glance.heads.block import context_features, embeddings, lm_head
from glance.heads.eagle import EagleHead, check_eagle_fits

__all__ = ["EagleDrafter"]


class EagleDrafter(GrowingDrafter):
    """An :class:`EagleHead` as a :class:`~glance.drafters.protocol.Drafter`
    that grows its own tree.

    Each round: one head pass over the positions committed since the last
    round (the target's features, each with the token after it), then one
    pass per depth over the ``width`` best nodes, each attending to the
    committed positions and its own ancestors. ``depth`` passes in all,
    against one for the block head. The head's keys and values live in one
    buffer: committed positions first, this round's drafted nodes after them
    (overwritten next round).
    """

    def __init__(self, head: EagleHead, target, width: int = 8, depth: int = 8):
        check_eagle_fits(head, target)
        if width < 1 or depth < 1:
            raise ValueError(f"width and depth must be >= 1; got {width} and {depth}")
        self.head, self.target = head, target
        self.width, self.max_depth = int(width), int(depth)
        self.embed, self.output = embeddings(target), lm_head(target)
        self.keys = self.values = None  # (1, H, capacity, d) buffers
        self.committed = 0  # positions in the buffers that are committed
        self.pending = None  # features not yet in the buffers
        self.next_tokens = None  # the token after each pending feature but the last
        self._last = None  # the latest tree

    def start(self, hidden_states, input_ids: torch.Tensor) -> None:
        self.keys = self.values = None
        self.committed = 0
        self.pending = context_features(hidden_states, self.head.target_layer_ids)
        self.next_tokens = input_ids[0, 1:].to(self.pending.device)

    def advance(self, hidden_states, rows: torch.Tensor) -> None:
        path = rows[1:].cpu().numpy() - 1
        self.pending = context_features(hidden_states, self.head.target_layer_ids)[:, rows]
        self.next_tokens = torch.from_numpy(self._last.tokens[path]).to(self.pending.device)

    def _room(self, size: int) -> None:
        """Buffers that hold at least ``size`` positions (doubling)."""
        have = 0 if self.keys is None else self.keys.shape[2]
        if size <= have:
            return
        cfg, p = self.head.config, self.pending
        heads = cfg.num_attention_heads
        shape = (1, heads, max(size, 2 * have, 256), cfg.hidden_size // heads)
        keys, values = p.new_zeros(shape), p.new_zeros(shape)
        if self.keys is not None:
            keys[:, :, : self.committed] = self.keys[:, :, : self.committed]
            values[:, :, : self.committed] = self.values[:, :, : self.committed]
        self.keys, self.values = keys, values

    def _pass(self, feats, tokens, positions, start: int, visible):
        """One head pass whose keys go to buffer slots ``start ..``; attends
        to slots ``0 .. start + n``."""
        head = self.head
        q, k, v = head.qkv(feats, self.embed(tokens), positions)
        end = start + k.shape[2]
        self.keys[:, :, start:end], self.values[:, :, start:end] = k, v
        return head.attend(feats, q, self.keys[:, :, :end], self.values[:, :, :end], visible)

    def _top(self, out: torch.Tensor):
        logp = torch.log_softmax(self.head.logits(out, self.output).float(), dim=-1)
        lp, ids = logp.topk(min(self.width, logp.shape[-1]), dim=-1)
        return ids, lp.double()

    @torch.no_grad()
    def draft_tree(self, root: int, length: int, depth: int, budget: int) -> CandidateTree:
        """The round's tree: at most ``budget`` nodes, at most ``depth`` deep."""
        device, m = self.pending.device, self.pending.shape[1]
        if self.committed != length - m:
            raise RuntimeError(
                f"eagle cache holds {self.committed} positions; expected {length - m}"
            )
        width = self.width
        self._room(length + width * max(depth - 1, 0))
        # The committed positions: causal among themselves, all earlier ones visible.
        visible = torch.ones(m, length, dtype=torch.bool, device=device)
        visible[:, length - m :] = torch.ones(m, m, dtype=torch.bool, device=device).tril()
        tokens = torch.cat([self.next_tokens, torch.tensor([root], device=device)])[None]
        positions = torch.arange(length - m, length, device=device)[None]
        out = self._pass(self.head.fuse(self.pending), tokens, positions, length - m, visible[None])
        self.committed = length
        ids, lp = self._top(out[0, -1:])
        # Every scored node, level by level: token, parent (-1: root), score.
        toks, parents, scores = [ids[0]], [torch.full_like(ids[0], -1)], [lp[0]]
        frontier = torch.arange(ids.shape[1], device=device)  # node ids, expanded next
        parent_slot = torch.full_like(frontier, -1)  # their parents' buffer slots
        feats = out[:, -1:].expand(1, len(frontier), -1)  # the output each came from
        slots = width * max(depth - 1, 0)
        ancestry = torch.zeros(slots, slots, dtype=torch.bool, device=device)
        used, n_nodes = 0, len(frontier)
        all_tokens, all_scores = toks[0], scores[0]
        for d in range(1, depth):
            k = len(frontier)
            mine = torch.arange(used, used + k, device=device)
            rows = torch.zeros(k, used + k, dtype=torch.bool, device=device)
            has = parent_slot >= 0
            rows[has, :used] = ancestry[parent_slot[has], :used]
            rows[torch.arange(k, device=device), mine] = True
            ancestry[mine, : used + k] = rows
            seen = torch.cat([torch.ones(k, length, dtype=torch.bool, device=device), rows], 1)
            pos = torch.full((1, k), length - 1 + d, device=device)
            out = self._pass(feats, all_tokens[frontier][None], pos, length + used, seen[None])
            used += k
            ids, lp = self._top(out[0])  # (k, width)
            total = (all_scores[frontier][:, None] + lp).reshape(-1)
            toks.append(ids.reshape(-1))
            parents.append(frontier.repeat_interleave(ids.shape[1]))
            scores.append(total)
            best = total.topk(min(width, total.numel())).indices
            row = best // ids.shape[1]
            frontier, parent_slot = n_nodes + best, mine[row]
            feats = out[:, row]
            n_nodes += total.numel()
            all_tokens, all_scores = torch.cat(toks), torch.cat(scores)
        depths = torch.cat([torch.full_like(t, i + 1) for i, t in enumerate(toks)])
        tree = _best_nodes(
            all_tokens.cpu().numpy(),
            torch.cat(parents).cpu().numpy(),
            depths.cpu().numpy(),
            all_scores.cpu().numpy(),
            budget,
        )
        self._last = tree
        return tree


def _best_nodes(tokens, parents, depths, scores, budget: int) -> CandidateTree:
    """The ``budget`` best-scoring nodes, ties to the shallower, packed
    parents-first (by depth, then rank)."""
    scores_a, depths_a = np.asarray(scores), np.asarray(depths, dtype=np.int64)
    order = np.lexsort((depths_a, -scores_a))[:budget]
    keep = order[np.lexsort((np.arange(order.size), depths_a[order]))]
    index = {int(node): i for i, node in enumerate(keep)}
    parents_a = np.asarray(parents, dtype=np.int64)
    new_parents = np.array(
        [index[int(p)] if p >= 0 else -1 for p in parents_a[keep]], dtype=np.int64
    )
    return CandidateTree(
        np.asarray(tokens, dtype=np.int64)[keep], new_parents, depths_a[keep], scores_a[keep]
    )
