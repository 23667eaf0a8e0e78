#!/bin/bash
#SBATCH -p nosuch
echo done
