#!/usr/bin/env python3
"""A reference Python agent loop for GuessTheNumber, the baseline rollfleet is
measured against (scripts/bench-baseline.sh).

It does what OpenRLHF's MultiTurnAgentExecutor does with the GEM multi-turn
example, over vLLM's HTTP API, in the usual asyncio way: one coroutine per
episode, a semaphore bounding the episodes in flight, one aiohttp session.
Each episode tokenizes its first prompt (the game's instructions as the
first user turn of the chat template) with /tokenize, then each turn asks
/v1/completions for a generation from the token ids so far, steps the game
with the action text, tokenizes only the feedback text with /tokenize, and
appends action and feedback tokens. The completion requests, sampling
settings, game rules and strings, feedback text and stop conditions are
rollfleet's (`rollout run --env game:GuessTheNumber-v0` with its defaults;
rollfleet also keeps the tokens of feedback texts it has seen, so it sends
fewer /tokenize requests), and each episode is written as one JSON line
with OpenRLHF's trajectory fields.

Standard library plus aiohttp (Debian: python3-aiohttp).
"""

import argparse
import asyncio
import json
import random
import re
import sys
import time

import aiohttp

# GEM's GuessTheNumber-v0, as rollfleet's envs package plays it.
MIN_NUMBER, MAX_NUMBER, MAX_TURNS = 1, 20, 10
INSTRUCTIONS = (
    "You are playing Guess The Number.\n"
    "You have to guess the number between {lo} and {hi} (inclusive) within {turns} turns.\n"
    "As you enter your guess, the game will provide you with hints such as the target number is 'higher' or 'lower'.\n"
    "You may provide your response in any manner. Only the number that is wrapped inside \\boxed{{}} will be "
    "considered as your guess, for example, \\boxed{{{example}}}.\n"
    "As you play, the history of your guesses will be appended below. Use the information to complete the game "
    "before you run out of guesses.\n"
    "Enter your first guess to start the game.\n"
)
CHAT_SUFFIX = "Enter your next guess within \\boxed{}."
TURN_LIMIT = "You have reached the maximum number of turns."
BOXED = re.compile(r"\\boxed\{(\d+)\}")

IM_START, IM_END = "<|im_start|>", "<|im_end|>"


class GuessTheNumber:
    """GEM's GuessTheNumberEnv: the same checks in the same order, the same
    strings and rewards."""

    def __init__(self, rng):
        self.target = rng.randint(MIN_NUMBER, MAX_NUMBER)
        self.example = rng.randint(MIN_NUMBER, MAX_NUMBER)
        self.turn = 0
        self.guesses = []

    def instructions(self):
        return INSTRUCTIONS.format(lo=MIN_NUMBER, hi=MAX_NUMBER, turns=MAX_TURNS, example=self.example)

    def step(self, action):
        """Returns (observation, reward, done)."""
        self.turn += 1
        t = self.turn
        found = BOXED.findall(action)
        guess = int(found[-1]) if found else 0
        if not guess:
            return f"At turn {t}, you did not provide a valid guess.", -0.1, True
        in_range = MIN_NUMBER <= guess <= MAX_NUMBER
        if not in_range:
            obs = f"At turn {t}, you guessed {guess}, which is outside the range specified."
        elif guess in self.guesses:
            obs = f"At turn {t}, you guessed {guess}, which has been already guessed before."
        else:
            self.guesses.append(guess)
            if guess == self.target:
                return f"Congratulations! You guessed the correct number {self.target} in {t} turns.", 1.0, True
            hint = "lower" if guess > self.target else "higher"
            obs = f"At turn {t}, you guessed {guess}, and the target number is {hint} than {guess}."
        if t >= MAX_TURNS:
            reward = 1 - abs(guess - self.target) / (MAX_NUMBER - MIN_NUMBER) if in_range else 0.0
            return TURN_LIMIT, reward, True
        return obs, 0.0, False


def feedback(closed, obs, done):
    """The text appended after an action: the action's turn closed
    canonically, then the observation as a user turn (rollfleet's chat
    package, OpenRLHF's GEM example)."""
    head = ("\n" if closed else IM_END + "\n") + IM_START + "user\n" + obs
    if done:
        return head + IM_END
    return head + "\n" + CHAT_SUFFIX + IM_END + "\n" + IM_START + "assistant\n"


class Model:
    """vLLM's HTTP API over one aiohttp session."""

    def __init__(self, session, url, model):
        self.session, self.url, self.model = session, url.rstrip("/"), model
        self.im_end = None

    async def post(self, path, body):
        async with self.session.post(self.url + path, data=json.dumps(body),
                                     headers={"Content-Type": "application/json"}) as r:
            data = await r.read()
            if r.status != 200:
                raise RuntimeError(f"{path}: {r.status} {data[:200]!r}")
            return json.loads(data)

    async def tokenize_messages(self, messages):
        r = await self.post("/tokenize", {"model": self.model, "messages": messages,
                                          "add_generation_prompt": True, "add_special_tokens": False})
        return r["tokens"]

    async def tokenize(self, text):
        r = await self.post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        return r["tokens"]

    async def complete(self, prompt, max_tokens, args, seed):
        r = await self.post("/v1/completions", {
            "model": self.model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": args.temperature, "top_p": args.top_p, "seed": seed,
            "n": 1, "logprobs": 0, "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
        })
        c = r["choices"][0]
        lp = c["logprobs"]
        # The sampled ids, from the "token_id:<id>" strings (as rollfleet reads them, without
        # asking for return_token_ids and its echo of the prompt).
        ids = [int(t[len("token_id:"):]) for t in lp["tokens"]]
        return ids, lp["token_logprobs"], c["text"], c["finish_reason"]


async def episode(model, args, index, out):
    rng = random.Random(args.seed * 1_000_003 + index)
    seed = rng.getrandbits(62)
    env = GuessTheNumber(rng)
    tokens = await model.tokenize_messages([{"role": "user", "content": env.instructions()}])
    logps = [0.0] * len(tokens)
    ranges, rewards = [], []
    truncated, finish = False, ""
    for turn in range(MAX_TURNS + 1):
        budget = min(args.max_tokens, args.max_length - len(tokens))
        if budget <= 0:
            truncated, finish = True, "max_length"
            break
        ids, lps, text, finish = await model.complete(tokens, budget, args, seed + turn)
        ranges.append([len(tokens), len(tokens) + len(ids)])
        tokens += ids
        logps += lps
        obs, reward, done = env.step(text)
        rewards.append(reward)
        closed = bool(ids) and ids[-1] == model.im_end
        ftoks = await model.tokenize(feedback(closed, obs, done))
        tokens += ftoks
        logps += [0.0] * len(ftoks)
        if done:
            truncated = finish == "length"
            break
        if args.max_length - len(tokens) <= 0:
            truncated, finish = True, "max_length"
            break
    total = sum(rewards)
    out.write(json.dumps({
        "episode_id": f"py-{index:06d}", "env": "game:GuessTheNumber-v0", "prompt": "", "label": "",
        "observation_tokens": tokens, "action_ranges": ranges, "rollout_log_probs": logps,
        "reward": total, "scores": rewards[-1] if rewards else total,
        "extra_logs": {"dummy_scores": rewards[-1] if rewards else 0.0, "turn_count": len(rewards)},
        "truncated": truncated, "turns": len(rewards), "step_rewards": rewards, "finish_reason": finish,
    }) + "\n")
    return len(rewards), total


async def main(args):
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async with session.get(args.url.rstrip("/") + "/v1/models") as r:
            name = (await r.json())["data"][0]["id"]
        model = Model(session, args.url, name)
        (model.im_end,) = await model.tokenize(IM_END)
        sem = asyncio.Semaphore(args.concurrency)

        async def bounded(i, out):
            async with sem:
                return await episode(model, args, i, out)

        start = time.monotonic()
        with open(args.out, "w", buffering=1 << 20) as out:
            results = await asyncio.gather(*(bounded(i, out) for i in range(args.episodes)))
        wall = time.monotonic() - start
    turns = sum(t for t, _ in results)
    print(f"episodes={len(results)} mean_reward={sum(r for _, r in results) / len(results):.4f} "
          f"mean_turns={turns / len(results):.2f} turns={turns} turns/s={turns / wall:.0f} wall={wall:.3f}s",
          file=sys.stderr)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="model server base URL (vLLM or rollout toyllm)")
    p.add_argument("--episodes", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=256, help="most episodes in flight")
    p.add_argument("--max-length", type=int, default=4096, help="whole-trajectory token budget")
    p.add_argument("--max-tokens", type=int, default=256, help="per-turn generation cap")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="trajectories.jsonl")
    a = p.parse_args()
    if a.episodes <= 0 or a.concurrency <= 0:
        p.error("--episodes and --concurrency must be positive")
    asyncio.run(main(a))
