#!/bin/bash
#SBATCH --hint=nomultithread
echo done
