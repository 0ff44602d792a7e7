"""Decode-jump arithmetic over block counts, by hand and against brute force."""

import itertools

from policies.paged_decode import extra_blocks, jump_iterations


def brute_extra(slack: list[int], x: int, bs: int) -> int:
    return sum(max(0, -(-(x - f) // bs)) for f in slack)


def test_extra_blocks_by_hand() -> None:
    # block size 4: slack 0 needs a block per 4 tokens; slack 3 grows 3 tokens for free
    assert extra_blocks([0, 3], 1, 4) == 1
    assert extra_blocks([0, 3], 3, 4) == 1
    assert extra_blocks([0, 3], 4, 4) == 2
    assert extra_blocks([0, 3], 5, 4) == 3  # 2 + 1
    assert extra_blocks([], 7, 4) == 0


def test_jump_is_the_longest_run_the_free_blocks_cover() -> None:
    bs = 4
    for slack in itertools.product(range(bs), repeat=3):
        for most, free in itertools.product(range(1, 12), range(0, 6)):
            k, pending = jump_iterations(list(slack), most, free, bs)
            fits = [x for x in range(most) if brute_extra(list(slack), x, bs) <= free]
            assert k == max(fits) + 1
            assert pending == brute_extra(list(slack), k - 1, bs)
