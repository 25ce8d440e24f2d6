#!/usr/bin/env python3
"""`adakv serve` through the official `openai` client: the sampling fields (penalties,
logit_bias, min_p, stop_token_ids, min_tokens), log probabilities (completions logprobs and
echo, chat logprobs and top_logprobs, streamed and not) and n samples of one prompt.

One server for the whole file, started and stopped as tests/server/test_openai_api.py does
(whose Server and helpers this file uses):

  ~/.cache/adakv/venv/bin/python tests/server/test_openai_sampling.py --adakv build/adakv [--tp 1]
"""
import math
import os
import sys
import threading
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_openai_api as base  # noqa: E402

# A prompt the model continues by repeating itself at temperature 0.
REPEAT = "one two three one two three one two three one two three one two three"
SHORT = base.SHORT


def setUpModule():
    base.setUpModule()


def tearDownModule():
    base.tearDownModule()


def completion(c, **kw):
    return c.completions.create(model=base.SERVER.name, **kw)


def repeats(tokens):
    """How many generated tokens repeat one generated before."""
    return len(tokens) - len(set(tokens))


class Penalties(base.TimedTest):
    def greedy_tokens(self, **extra):
        r = completion(self.c, prompt=REPEAT, max_tokens=40, temperature=0, logprobs=0,
                       extra_body=dict(ignore_eos=True, **extra.pop("extra_body", {})), **extra)
        return r.choices[0].logprobs.tokens

    def test_penalties_change_a_repetitive_output(self):
        plain = self.greedy_tokens()
        self.assertGreater(repeats(plain), 20, f"the prompt does not make the model repeat: {plain}")
        for kw in (dict(frequency_penalty=2.0), dict(presence_penalty=2.0),
                   dict(extra_body={"repetition_penalty": 1.5})):
            with self.subTest(**{k: str(v) for k, v in kw.items()}):
                got = self.greedy_tokens(**kw)
                print(f"\n[test] {kw}: {repeats(got)} repeated tokens of 40 (plain {repeats(plain)})",
                      file=sys.stderr)
                self.assertLess(repeats(got), repeats(plain), f"{kw}: {got}")
        # A negative frequency penalty makes it repeat at least as much.
        eager = self.greedy_tokens(frequency_penalty=-2.0)
        self.assertGreaterEqual(repeats(eager), repeats(plain))

    def test_logit_bias_forces_and_removes(self):
        # The text of token 1000, and the first greedy token's id (from the CLI's --json).
        echo = completion(self.c, prompt=[1000], max_tokens=0, echo=True, logprobs=0)
        forced_text = echo.choices[0].logprobs.tokens[0]
        r = completion(self.c, prompt=SHORT, max_tokens=8, temperature=1.0, seed=3, logprobs=0,
                       logit_bias={"1000": 100}, extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].logprobs.tokens, [forced_text] * 8)
        ref = base.generate_ref(SHORT, 4, extra=["--policy", "full"])
        first = ref["tokens"][0]
        plain = completion(self.c, prompt=SHORT, max_tokens=4, temperature=0, logprobs=0,
                           extra_body={"kv_policy": "full"})
        first_text = plain.choices[0].logprobs.tokens[0]
        for temperature in (0, 1.0):
            banned = completion(self.c, prompt=SHORT, max_tokens=16, temperature=temperature,
                                seed=5, logprobs=0, logit_bias={str(first): -100},
                                extra_body={"kv_policy": "full", "ignore_eos": True})
            self.assertNotIn(first_text, banned.choices[0].logprobs.tokens)

    def test_stop_token_ids_and_min_tokens(self):
        ref = base.generate_ref(SHORT, 6, extra=["--policy", "full", "--ignore-eos"])
        r = completion(self.c, prompt=SHORT, max_tokens=6, temperature=0,
                       extra_body={"kv_policy": "full", "ignore_eos": True,
                                   "stop_token_ids": [ref["tokens"][2]]})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.usage.completion_tokens, 3)
        # The chat answer ends early with end-of-turn; min_tokens keeps it going.
        msgs = [{"role": "user", "content": "Say hi."}]
        short = self.c.chat.completions.create(model=base.SERVER.name, messages=msgs,
                                               max_tokens=60, temperature=0)
        self.assertEqual(short.choices[0].finish_reason, "stop")
        want = short.usage.completion_tokens + 5
        longer = self.c.chat.completions.create(model=base.SERVER.name, messages=msgs,
                                                max_tokens=60, temperature=0,
                                                extra_body={"min_tokens": want})
        self.assertGreaterEqual(longer.usage.completion_tokens, want)

    def test_min_p_one_is_greedy(self):
        greedy = completion(self.c, prompt=SHORT, max_tokens=8, temperature=0,
                            extra_body={"ignore_eos": True})
        r = completion(self.c, prompt=SHORT, max_tokens=8, temperature=1.5, seed=9,
                       extra_body={"ignore_eos": True, "min_p": 1.0})
        self.assertEqual(r.choices[0].text, greedy.choices[0].text)

    def test_out_of_range_is_400_naming_the_field(self):
        cases = [
            ("presence_penalty", dict(presence_penalty=-3)),
            ("presence_penalty", dict(presence_penalty=2.5)),
            ("frequency_penalty", dict(frequency_penalty=3)),
            ("frequency_penalty", dict(frequency_penalty="x")),
            ("logit_bias", dict(logit_bias={"50256": 5})),
            ("logit_bias", dict(logit_bias={"7": 101})),
            ("logit_bias", dict(logit_bias={"seven": 1})),
            ("repetition_penalty", dict(extra_body={"repetition_penalty": 0})),
            ("min_p", dict(extra_body={"min_p": 1.5})),
            ("stop_token_ids", dict(extra_body={"stop_token_ids": [49152]})),
            ("min_tokens", dict(extra_body={"min_tokens": -1})),
            ("logprobs", dict(logprobs=21)),
            ("echo", dict(echo="yes")),
        ]
        for param, kw in cases:
            with self.subTest(param=param, body=str(kw)):
                with self.assertRaises(openai.BadRequestError) as cm:
                    completion(self.c, prompt=SHORT, max_tokens=2, **kw)
                self.assertEqual(cm.exception.param, param, f"{cm.exception.body}")
        msgs = [{"role": "user", "content": "hi"}]
        for param, kw in (("top_logprobs", dict(logprobs=True, top_logprobs=21)),
                          ("top_logprobs", dict(top_logprobs=3)),
                          ("presence_penalty", dict(presence_penalty=-2.5)),
                          ("logit_bias", dict(logit_bias={"-1": 5}))):
            with self.subTest(param=param, body=str(kw)):
                with self.assertRaises(openai.BadRequestError) as cm:
                    self.c.chat.completions.create(model=base.SERVER.name, messages=msgs,
                                                   max_tokens=2, **kw)
                self.assertEqual(cm.exception.param, param, f"{cm.exception.body}")


class Logprobs(base.TimedTest):
    def check_completion_shape(self, lp, n):
        self.assertEqual(len(lp.tokens), n)
        self.assertEqual(len(lp.token_logprobs), n)
        self.assertEqual(len(lp.top_logprobs), n)
        self.assertEqual(len(lp.text_offset), n)
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))

    def test_echo_max_tokens_0_as_lm_eval_sends_it(self):
        # lm-evaluation-harness's log-likelihood request: echo, logprobs, max_tokens 0 (or 1).
        ids = base.goldens()[SHORT]
        for prompt in (SHORT, [ids]):
            for max_tokens in (0, 1):
                with self.subTest(prompt=str(prompt)[:20], max_tokens=max_tokens):
                    r = completion(self.c, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                   logprobs=1, echo=True, seed=1234)
                    ch = r.choices[0]
                    self.assertEqual(ch.finish_reason, "length")
                    self.assertTrue(ch.text.startswith(SHORT), ch.text)
                    if max_tokens == 0:
                        self.assertEqual(ch.text, SHORT)
                    self.assertEqual(r.usage.completion_tokens, max_tokens)
                    lp = ch.logprobs
                    self.check_completion_shape(lp, len(ids) + max_tokens)
                    self.assertIsNone(lp.token_logprobs[0])
                    self.assertIsNone(lp.top_logprobs[0])
                    self.assertEqual("".join(lp.tokens[:len(ids)]), SHORT)
                    self.assertEqual(lp.text_offset[0], 0)
                    for tok, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
                        self.assertLess(tok, 0)
                        self.assertEqual(len(top), 1)
                        self.assertLessEqual(tok, max(top.values()) + 1e-12)
        # The same prompt's logprobs with and without a generated token.
        a = completion(self.c, prompt=SHORT, max_tokens=0, echo=True, logprobs=1)
        b = completion(self.c, prompt=SHORT, max_tokens=1, echo=True, logprobs=1)
        self.assertEqual(a.choices[0].logprobs.token_logprobs,
                         b.choices[0].logprobs.token_logprobs[:len(ids)])

    def test_completion_logprobs_stream_equals_non_stream(self):
        kw = dict(prompt=SHORT, max_tokens=10, temperature=0, logprobs=3,
                  extra_body={"ignore_eos": True})
        full = completion(self.c, **kw)
        lp = full.choices[0].logprobs
        self.check_completion_shape(lp, 10)
        self.assertEqual("".join(lp.tokens), full.choices[0].text)
        for tok, top in zip(lp.token_logprobs, lp.top_logprobs):
            self.assertEqual(tok, max(top.values()), "greedy: the token is the likeliest")
            self.assertLessEqual(sum(math.exp(v) for v in top.values()), 1 + 1e-9)
        chunks = [ch for ch in completion(self.c, stream=True, **kw) if ch.choices]
        tokens, logprobs, offsets = [], [], []
        for ch in chunks:
            if ch.choices[0].logprobs:
                tokens += ch.choices[0].logprobs.tokens
                logprobs += ch.choices[0].logprobs.token_logprobs
                offsets += ch.choices[0].logprobs.text_offset
        self.assertEqual(tokens, lp.tokens)
        self.assertEqual(logprobs, lp.token_logprobs)
        self.assertEqual(offsets, lp.text_offset)
        # Streamed echo: the prompt and its logprobs come first.
        chunks = [ch for ch in completion(self.c, stream=True, echo=True, **kw) if ch.choices]
        first = chunks[0].choices[0]
        self.assertEqual(first.text, SHORT)
        self.assertIsNone(first.logprobs.token_logprobs[0])
        self.assertEqual("".join(first.logprobs.tokens), SHORT)
        text = "".join(ch.choices[0].text for ch in chunks)
        self.assertEqual(text, SHORT + full.choices[0].text)

    def test_chat_top_logprobs(self):
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        kw = dict(model=base.SERVER.name, messages=msgs, max_tokens=8, temperature=0,
                  logprobs=True, top_logprobs=5)
        # The prompt's blocks cached first: the requests compared below all start from them (a
        # prompt computed whole and one computed after cached blocks differ by KV rounding).
        self.c.chat.completions.create(model=base.SERVER.name, messages=msgs, max_tokens=1)
        r = self.c.chat.completions.create(**kw)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for entry in content:
            tops = [t.logprob for t in entry.top_logprobs]
            self.assertEqual(len(tops), 5)
            self.assertEqual(tops, sorted(tops, reverse=True))
            self.assertLessEqual(sum(math.exp(t) for t in tops), 1 + 1e-9)
            self.assertEqual(entry.token, entry.top_logprobs[0].token)
            self.assertEqual(entry.logprob, tops[0])
            self.assertEqual(bytes(entry.bytes).decode("utf-8", "replace"), entry.token)
        # No alternatives: logprobs alone.
        r0 = self.c.chat.completions.create(model=base.SERVER.name, messages=msgs, max_tokens=3,
                                            temperature=0, logprobs=True)
        self.assertEqual([e.top_logprobs for e in r0.choices[0].logprobs.content], [[]] * 3)
        # Without logprobs: null.
        r1 = self.c.chat.completions.create(model=base.SERVER.name, messages=msgs, max_tokens=3)
        self.assertIsNone(r1.choices[0].logprobs)
        # Streamed: each chunk carries its tokens' entries; together the same list.
        streamed = []
        for ch in self.c.chat.completions.create(stream=True, **kw):
            if ch.choices and ch.choices[0].logprobs:
                streamed += ch.choices[0].logprobs.content
        self.assertEqual([(e.token, e.logprob) for e in streamed],
                         [(e.token, e.logprob) for e in content])


class Samples(base.TimedTest):
    def samples(self, **kw):
        return completion(self.c, prompt=SHORT, max_tokens=24, temperature=0.8, seed=7, n=4,
                          extra_body={"ignore_eos": True}, **kw)

    def test_four_distinct_reproducible_samples(self):
        r = self.samples()
        self.assertEqual([c.index for c in r.choices], [0, 1, 2, 3])
        texts = [c.text for c in r.choices]
        print(f"\n[test] n=4 at temperature 0.8, seed 7: {texts}", file=sys.stderr)
        self.assertEqual(len(set(texts)), 4, texts)
        self.assertEqual([c.text for c in self.samples().choices], texts)
        one = completion(self.c, prompt=SHORT, max_tokens=24, temperature=0.8, seed=7,
                         extra_body={"ignore_eos": True})
        # The prompt is counted once; the completions add up.
        self.assertEqual(r.usage.prompt_tokens, one.usage.prompt_tokens)
        self.assertEqual(r.usage.completion_tokens, 4 * 24)
        # Sample 0 draws from the request's seed, as a single request does.
        self.assertEqual(texts[0], one.choices[0].text)

    def test_streamed_chat_samples_carry_their_index(self):
        msgs = [{"role": "user", "content": "Name a colour."}]
        kw = dict(model=base.SERVER.name, messages=msgs, max_tokens=12, temperature=0.8, seed=3,
                  n=3, extra_body={"ignore_eos": True})
        plain = self.c.chat.completions.create(**kw)
        streamed, finished, usage = {}, {}, None
        for ch in self.c.chat.completions.create(stream=True,
                                                 stream_options={"include_usage": True}, **kw):
            if ch.usage:
                usage = ch.usage
            for c in ch.choices:
                streamed[c.index] = streamed.get(c.index, "") + (c.delta.content or "")
                if c.finish_reason:
                    finished[c.index] = c.finish_reason
        self.assertEqual(sorted(finished), [0, 1, 2])
        self.assertEqual(streamed, {c.index: c.message.content for c in plain.choices})
        self.assertEqual(usage.prompt_tokens, plain.usage.prompt_tokens)
        self.assertEqual(usage.completion_tokens, 3 * 12)

    def peak_bytes_held(self, n, policy):
        """The most KV bytes /metrics showed held while one request of n samples ran."""
        peak, running = [0.0], [True]

        def poll():
            while running[0]:
                ms, _, _ = base.SERVER.metrics()
                peak[0] = max(peak[0], base.metric(ms, "adakv:kv_cache_bytes_held"))
                time.sleep(0.02)

        before = base.metric(base.SERVER.metrics()[0], "adakv:prompt_tokens_total")
        t = threading.Thread(target=poll)
        t.start()
        try:
            r = completion(self.c, prompt=base.long_text(1200), max_tokens=32, temperature=0.8,
                           n=n, extra_body={"ignore_eos": True, "kv_policy": policy,
                                            "kv_budget": 0.2})
        finally:
            running[0] = False
            t.join()
        after = base.metric(base.SERVER.metrics()[0], "adakv:prompt_tokens_total")
        self.assertEqual(after - before, r.usage.prompt_tokens, "the prompt counted once")
        return peak[0]

    def test_samples_share_the_prompts_blocks(self):
        for policy in ("full", "adakv"):
            with self.subTest(policy=policy):
                one, four = self.peak_bytes_held(1, policy), self.peak_bytes_held(4, policy)
                print(f"\n[test] {policy}: peak KV bytes held, n=1 {one:.0f}, n=4 {four:.0f} "
                      f"({four / one:.2f}x; unshared would be ~4x)", file=sys.stderr)
                self.assertGreater(one, 0)
                # The prompt's blocks are held once: four samples add only their own tokens.
                self.assertLess(four, 2 * one)

    def test_best_of_is_refused(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            completion(self.c, prompt=SHORT, max_tokens=2, n=2, best_of=3)
        self.assertEqual(cm.exception.param, "best_of")


if __name__ == "__main__":
    base.main()
