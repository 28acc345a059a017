// The quickstart's demo project: Spark's scripted demo model changes this file.
/* global console */
function greet() {
  return "hello";
}

console.log(greet());
