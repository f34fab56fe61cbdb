#include <iostream>
int main() { std::cout << "omni\n"; }
