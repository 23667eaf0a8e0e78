#!/bin/bash
#SBATCH -t 90
echo done
