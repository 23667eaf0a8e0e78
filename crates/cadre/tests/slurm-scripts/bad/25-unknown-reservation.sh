#!/bin/bash
#SBATCH --reservation=nosuch
echo done
