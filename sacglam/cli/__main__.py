from sacglam.cli import main

main()
