from speedlayer.cli import main

main()
