"""The simulator's prefix cache: a prompt's leading blocks already computed cost no prefill.

As vLLM's automatic prefix caching and SGLang's radix cache do, a request whose first tokens equal
an earlier request's reuses their KV: its prefill covers only the rest, so its TTFT depends on what
ran before it. Modelled the vLLM way: the prompt's token ids in blocks of ``block_tokens`` (16), each
block keyed by a hash of every id up to its end (a block matches only when the whole prefix before
it matches too), a hit counting only whole blocks from the start, least-recently-used blocks evicted
beyond ``capacity_tokens``. A prompt's blocks are stored when it arrives (real servers store them once
prefilled; the difference shows only for identical prompts arriving together), and with its answer's
once it is complete (``store``), so a conversation's next turn, whose history holds that answer,
finds both.

With synthetic prompts that start differently the cache never hits; with ``--shared-prefix-tokens``
every request after the first finds the shared blocks. That is what the tests and the prompt-length
work of issue 15 need from it. ``clear`` is the reset a client asks for before measuring
(``/reset_prefix_cache``, ``/flush_cache``).
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    def __init__(self, capacity_tokens: int, block_tokens: int = 16) -> None:
        self.block_tokens = block_tokens
        self.capacity_blocks = max(1, capacity_tokens // block_tokens)
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0  # prompt tokens looked up (vllm:prefix_cache_queries)
        self.hits = 0  # of those, served from the cache (vllm:prefix_cache_hits)

    def _keys(self, ids: list[int]) -> list[int]:
        keys = []
        h = 0
        b = self.block_tokens
        for end in range(b, len(ids) + 1, b):
            h = hash((h, tuple(ids[end - b : end])))
            keys.append(h)
        return keys

    def store(self, ids: list[int]) -> None:
        """Keep the blocks of ``ids`` (a finished sequence: its prompt and what it generated)."""
        self._keep(self._keys(ids))

    def _keep(self, keys: list[int]) -> None:
        for k in keys:
            self._blocks[k] = None
            self._blocks.move_to_end(k)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def lookup(self, ids: list[int]) -> int:
        """Tokens of ``ids`` already cached (whole blocks from the start), and store the rest."""
        keys = self._keys(ids)
        hit = 0
        for k in keys:
            if k not in self._blocks:
                break
            hit += 1
        self._keep(keys)
        cached = hit * self.block_tokens
        # at least one token is always computed (the last one's logits give the first output token)
        cached = min(cached, max(0, len(ids) - 1))
        self.queries += len(ids)
        self.hits += cached
        return cached

    def clear(self) -> int:
        """Forget every block (a cache reset); the blocks there were."""
        n = len(self._blocks)
        self._blocks.clear()
        return n
