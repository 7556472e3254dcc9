"""Writes the deterministic English prose that the ggml end-to-end tests feed to llama.cpp
(tests/data/ggml_prose.txt): sentences assembled from fixed word lists with a seeded generator,
so the text is ours, needs no download and reads like plain narrative to a language model.

    python3 tools/ggml_text.py > tests/data/ggml_prose.txt
"""
from __future__ import annotations

import random

NAMES = ["Anna", "the miller", "old Tomas", "the ferryman", "Mara", "the schoolteacher",
         "the two brothers", "the baker's daughter", "the shepherd", "Elias"]
PLACES = ["the river", "the market square", "the mill", "the high pasture", "the harbour",
          "the orchard", "the stone bridge", "the village school", "the forest road", "the inn"]
VERBS = ["walked to", "looked across", "waited by", "hurried past", "returned to",
         "sat quietly near", "cleaned", "painted the door of", "left a basket at", "spoke of"]
TIMES = ["early in the morning", "after the rain had stopped", "before the bells rang",
         "late in the afternoon", "when the fog lifted", "on the first day of spring",
         "as the lamps were lit", "during the long winter"]
THINGS = ["a letter from the city", "a loaf of warm bread", "a lantern", "the old map",
          "a basket of apples", "a broken wheel", "a book with a red cover", "fresh milk"]
FEELINGS = ["glad", "tired but content", "worried", "curious", "patient", "restless",
            "hopeful", "quiet and thoughtful"]
LINKS = ["Later", "Meanwhile", "Soon", "After a while", "That evening", "The next day"]


def sentence(rng: random.Random) -> str:
    kind = rng.randrange(5)
    who, where, when = rng.choice(NAMES), rng.choice(PLACES), rng.choice(TIMES)
    if kind == 0:
        s = f"{who} {rng.choice(VERBS)} {where} {when}"
    elif kind == 1:
        s = f"{rng.choice(LINKS)}, {who} carried {rng.choice(THINGS)} to {where}"
    elif kind == 2:
        s = f"{who} felt {rng.choice(FEELINGS)}, because {rng.choice(NAMES)} had found {rng.choice(THINGS)} at {where}"
    elif kind == 3:
        s = f"Nobody at {where} remembered {rng.choice(THINGS)}, but {who} did"
    else:
        s = f"{when.capitalize()}, {who} and {rng.choice(NAMES)} {rng.choice(VERBS)} {where} together"
    return s[0].upper() + s[1:] + "."


def text(paragraphs: int = 60, seed: int = 2026) -> str:
    rng = random.Random(seed)
    out = []
    for _ in range(paragraphs):
        out.append(" ".join(sentence(rng) for _ in range(rng.randint(4, 7))))
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    print(text(), end="")
