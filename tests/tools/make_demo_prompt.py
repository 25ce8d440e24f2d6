#!/usr/bin/env python3
"""The main job's long prompt: about 3,800 tokens of the GPL-3 text (every Debian system has it
in base-files) with one fact hidden in the middle, and a question about that fact at the end."""
import sys

SOURCE = "/usr/share/common-licenses/GPL-3"
FACT = "Note from the archivist: the access code for the archive room is 7391."
QUESTION = "Question: What is the access code for the archive room? Answer with the number only."


def main():
    with open(SOURCE, encoding="utf-8") as f:
        paragraphs = f.read().split("\n\n")[:60]
    middle = len(paragraphs) // 2
    doc = "\n\n".join(paragraphs[:middle] + [FACT] + paragraphs[middle:])
    sys.stdout.write(doc + "\n\n" + QUESTION)


if __name__ == "__main__":
    main()
