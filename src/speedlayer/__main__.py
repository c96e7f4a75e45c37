from speedlayer.cli.app import main

main()
