from cyclejepa.cli import main

main()
