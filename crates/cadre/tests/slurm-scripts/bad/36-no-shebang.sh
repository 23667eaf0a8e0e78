echo no interpreter line
