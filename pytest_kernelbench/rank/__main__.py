from .checker import main

main()
