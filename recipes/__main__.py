"""``python -m recipes value RECIPE KEY [KEY=VALUE ...]``: one value of a recipe, for the launch scripts."""

import sys

from recipes.reader import main

if __name__ == "__main__":
    sys.exit(main())
