#!/usr/bin/env python3
"""A toy MEGATRON-CNTRL data set: five-sentence stories in ROCStories' CSV format and a knowledge base in
ConceptNet's assertions CSV format, made so that each sentence after the first introduces a concept
linked in the knowledge base to the one before it (food -> place -> object -> activity -> feeling), and
the story set leaves several choices at each step: the conditional generator has to read the knowledge
it is given to know which. Deterministic for a seed.

usage: make_toy_data.py OUT_DIR [--stories N] [--seed S]
writes OUT_DIR/stories.csv (training), OUT_DIR/valid_stories.csv, OUT_DIR/conceptnet.csv and
OUT_DIR/control.jsonl (first sentences of held-out stories, with keywords that steer sentence 2 to a
place the food is not at)."""
import argparse
import csv
import json
import os
import random

PLACES = {  # food -> the places it is at
    "bread": ["bakery", "market", "kitchen"], "cake": ["bakery", "cafe", "kitchen"],
    "fish": ["market", "harbor", "store"], "apples": ["farm", "market", "store"],
    "milk": ["farm", "store", "cafe"], "cheese": ["store", "farm", "market"],
    "soup": ["cafe", "kitchen", "diner"], "rice": ["store", "diner", "kitchen"],
}
OBJECTS = {  # place -> objects at it
    "bakery": ["oven", "counter"], "market": ["cart", "scale"], "kitchen": ["stove", "knife"],
    "cafe": ["table", "radio"], "harbor": ["boat", "net"], "store": ["basket", "ladder"],
    "farm": ["tractor", "bucket"], "diner": ["menu", "napkin"],
}
ACTIVITIES = {  # object -> what it is used for
    "oven": "bake", "counter": "wait", "cart": "shop", "scale": "weigh", "stove": "cook", "knife": "cut",
    "table": "sit", "radio": "listen", "boat": "sail", "net": "catch", "basket": "carry", "ladder": "climb",
    "tractor": "plow", "bucket": "fetch", "menu": "order", "napkin": "wipe",
}
FEELINGS = {a: f for a, f in zip(sorted(set(ACTIVITIES.values())),
                                  ["calm", "proud", "happy", "tired", "relaxed", "busy", "glad", "cheerful",
                                   "merry", "sleepy", "content", "pleased", "joyful", "patient", "careful",
                                   "eager"])}
PEOPLE = [("Tom", "He"), ("Ann", "She"), ("Sam", "He"), ("Kate", "She"), ("Ben", "He"), ("Lily", "She"),
          ("Max", "He"), ("Rose", "She")]


def story(rng):
    name, pronoun = rng.choice(PEOPLE)
    food = rng.choice(sorted(PLACES))
    place = rng.choice(PLACES[food])
    obj = rng.choice(OBJECTS[place])
    activity = ACTIVITIES[obj]
    return [f"{name} wanted some {food}.", f"{pronoun} went to the {place}.", f"The {place} had a {obj}.",
            f"{pronoun} used the {obj} to {activity}.", f"{pronoun} felt {FEELINGS[activity]}."]


def triples():
    out = []
    for food, places in sorted(PLACES.items()):
        out += [("AtLocation", food, p) for p in places]
    for place, objects in sorted(OBJECTS.items()):
        out += [("AtLocation", o, place) for o in objects]
    out += [("UsedFor", o, a) for o, a in sorted(ACTIVITIES.items())]
    out += [("Causes", a, f) for a, f in sorted(FEELINGS.items())]
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--stories", type=int, default=600)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for name, n in (("stories.csv", a.stories), ("valid_stories.csv", max(20, a.stories // 10))):
        with open(os.path.join(a.out, name), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["storyid", "storytitle", "sentence1", "sentence2", "sentence3", "sentence4", "sentence5"])
            for i in range(n):
                w.writerow([f"{name[0]}{i}", "Toy"] + story(rng))
    with open(os.path.join(a.out, "conceptnet.csv"), "w") as f:
        for i, (rel, head, tail) in enumerate(triples()):
            f.write(f"/a/[/r/{rel}/,/c/en/{head}/,/c/en/{tail}/]\t/r/{rel}\t/c/en/{head}\t/c/en/{tail}\t{{}}\n")
    # Control: the first sentence of a story, and for sentence 2 a place the food is not at.
    with open(os.path.join(a.out, "control.jsonl"), "w") as f:
        for i in range(24):
            name, _ = PEOPLE[i % len(PEOPLE)]
            food = sorted(PLACES)[i % len(PLACES)]
            elsewhere = sorted(set(OBJECTS) - set(PLACES[food]))
            f.write(json.dumps({"context": f"{name} wanted some {food}.",
                                "keywords": [[elsewhere[i % len(elsewhere)]]]}) + "\n")


if __name__ == "__main__":
    main()
