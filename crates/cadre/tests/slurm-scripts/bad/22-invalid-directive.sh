#!/bin/bash
#SBATCH myscriptarg
echo done
