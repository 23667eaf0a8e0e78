#!/bin/bash
#SBATCH -A proj1
echo done
